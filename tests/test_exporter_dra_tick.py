"""A node metered through DRA and HAMi's device plugin at once, computed by hand.

The ResourceClaims and ResourceSlices of tests/data/dra/ are served by a recorded API server
(testkit/dra_api.py), their pods (plus a device-plugin HAMi pod) by a pod list; NVML is the
simulator's fake pynvml; HAMi's regions are HAMi-core's bytes under containers/ and claims/.
The fixtures span three nodes; here they are put on one, so that one Tick holds them all.
"""
from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import os
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from slicemeter.common import GiB
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats
from slicemeter.exporter.sources.dra_source import DraCache
from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import PodCache
from slicemeter.simulator.nvml import ProcNow
from slicemeter.testkit.dra_api import CLAIMS_PATH, SLICES_PATH, TOKEN, DraApi
from slicemeter.testkit.hami_bytes import Proc, build_region
from slicemeter.testkit.kube_api import CERT
from slicemeter.testkit.static_node import StaticNode, gpu, pod, write_cgroup, write_region

DATA = Path(__file__).parent / "data" / "dra"
NODE = "gpu-node-1"
CLUSTER = "https://acme.example:6443"
TS = 1_795_000_000_000

HAMI_GPU = "GPU-3a1f6c2e-8a41-4d4b-9e38-6f0f3c1b2a10"        # hami-gpu-0
NV_SHARE, NV_SLICED, MIG_PARENT, NV_WHOLE = (f"GPU-8c0e4f3a-1b2d-4c5e-8f70-9a1b2c3d4e5{i}" for i in range(4))
PLUGIN_GPU = "GPU-0a1b2c3d-0000-1111-2222-333344445555"       # HAMi's device plugin's
NPU = "npu-node-1-0"
PLUGIN_UID = "6f1c2a4e-9b7d-4c3e-8a21-0d9e8f7a6b5c"
TRAIN_CLAIM_UID = "7d1c2b3a-0e9f-4a8b-8c7d-6e5f4a3b2c01"
HAMI, NVIDIA, ASCEND = "hami-core-gpu.project-hami.io", "gpu.nvidia.com", "ascend.project-hami.io"
TRAIN_PID, MONITOR_PID, PLUGIN_PID = 7100, 7200, 7300
REGION_NAME = "5e0d8c1a-7b2f-4e6d-9a3c-1f2e3d4c5b6a.cache"


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def on_one_node(doc: dict) -> dict:
    """The fixtures' objects, every one on NODE: slices, claims' node selectors, pods."""
    doc = copy.deepcopy(doc)
    for item in doc["items"]:
        spec, status = item.get("spec", {}), item.get("status", {})
        if item.get("kind") == "ResourceSlice" or "containers" in spec:
            spec["nodeName"] = NODE
        for term in status.get("allocation", {}).get("nodeSelector", {}).get("nodeSelectorTerms", []):
            term["matchFields"][0]["values"] = [NODE]
    return doc


def with_container_ids(p: dict) -> dict:
    """A pod as the kubelet's /pods has it once running: its containers' runtime ids."""
    uid = p["metadata"]["uid"].replace("-", "")
    p.setdefault("status", {})["containerStatuses"] = [
        {"name": c["name"], "containerID": "containerd://" + (uid + f"{i:02d}").ljust(64, "0")}
        for i, c in enumerate(p["spec"]["containers"])]
    return p


def plugin_pod() -> dict:
    """A HAMi device-plugin pod on another GPU: 20480 MiB and 25 cores."""
    return pod(PLUGIN_UID, "chat", "team-d", ["main"], allocated=f"{PLUGIN_GPU},NVIDIA,20480,25:;")


class Node:
    """The exporter of NODE: fake NVML, HAMi dirs, /proc, pod list file, DRA from `api`."""

    def __init__(self, tmp: Path, api: DraApi):
        self.hami, self.proc, self.pods_path = tmp / "vgpu", tmp / "proc", tmp / "pods.json"
        (self.hami / "containers").mkdir(parents=True)
        self.pods = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": [
            with_container_ids(p) for p in on_one_node(load("pods.json"))["items"]] + [plugin_pod()]}
        self.write_pods()
        for item, container, pid in ((self.pod("gpu-monitor"), "exporter", MONITOR_PID),
                                     (self.pod("train"), "trainer", TRAIN_PID), (plugin_pod(), "main", PLUGIN_PID)):
            write_cgroup(self.proc, pid, item, container)
        gpus = [gpu(u, used=0) for u in (PLUGIN_GPU, HAMI_GPU, NV_SHARE, NV_SLICED, MIG_PARENT, NV_WHOLE)]
        procs = {0: [ProcNow(PLUGIN_PID, 5 * GiB, 20, 5)], 1: [ProcNow(TRAIN_PID, 6 * GiB, 12, 4)],
                 3: [ProcNow(MONITOR_PID, 1 * GiB, 1, 0)]}
        write_region(self.hami, PLUGIN_UID, "main", devices=[(PLUGIN_GPU, 20 * GiB, 25)],
                     procs=[Proc(pid=1, hostpid=PLUGIN_PID, mem=[(GiB, 0, 4 * GiB)], sm_util=[20])])
        self.static = StaticNode(gpus=gpus, procs=procs, ts_ms=TS)
        self.api = api
        args = exporter_args("--dra-api", api.url, "--dra-ca", str(CERT), "--token-file", str(tmp / "token"))
        (tmp / "token").write_text(TOKEN + "\n")
        from slicemeter.exporter.cli import _dra_fetch

        self.dra = DraCache(_dra_fetch(args), NODE)
        self.pod_cache = PodCache(lambda: json.loads(self.pods_path.read_text()))
        self.builder = TickBuilder(NODE, CLUSTER, NvmlReader(self.static.fake_nvml(), initialised=True), str(self.hami),
                                   self.pod_cache, proc_root=str(self.proc), dra=self.dra)

    def pod(self, name: str) -> dict:
        return next(p for p in self.pods["items"] if p["metadata"]["name"] == name)

    def write_pods(self) -> None:
        self.pods_path.write_text(json.dumps(self.pods))

    def claim(self, name: str) -> dict:
        return next(c for c in self.api.claims["items"] if c["metadata"]["name"] == name)

    def tick(self, n: int = 0):
        assert self.pod_cache.refresh() and self.dra.refresh()
        return self.builder.build(TS + n * 10_000)


def exporter_args(*argv: str) -> argparse.Namespace:
    from slicemeter.exporter import cli

    p = argparse.ArgumentParser()
    cli.configure(p)
    return p.parse_args(["--hami-dir", "/nonexistent", "--node", NODE, *argv])


def claim_region(hami: Path, claim_uid: str, **region) -> Path:
    d = hami / "claims" / claim_uid
    d.mkdir(parents=True, exist_ok=True)
    (d / REGION_NAME).write_bytes(bytes(build_region(**region)) + b"\0")
    return d


@pytest.fixture
def node(tmp_path):
    with DraApi(on_one_node(load("resourceclaims.json")), on_one_node(load("resourceslices.json"))) as api:
        yield Node(tmp_path, api)


def rows(res) -> dict[tuple[str, str, str | None], object]:
    """(pod, container, claim) -> its slice; each once."""
    out = {}
    for s in res.tick.slices:
        key = (s.pod, s.container, s.claim)
        assert key not in out, f"two slice rows for {key}"
        out[key] = s
    return out


def shares(res) -> dict[tuple[str, str, str | None], tuple]:
    """(pod, container, claim) -> (GPU, driver, dominant, by memory, by cores), as /metrics and the Tick say."""
    from slicemeter.exporter.assemble.shares import allocation_share

    total = {g.gpu_uuid: g.memory_total_bytes for g in res.tick.gpus}
    return {k: (s.gpu_uuid, s.driver, allocation_share(s, total.get(s.gpu_uuid)), s.alloc_mem_share_ratio,
                s.alloc_cores_share_ratio) for k, s in rows(res).items()}


def test_one_tick_holds_every_containers_slice_with_its_share_computed_by_hand(node):
    claim_region(node.hami, TRAIN_CLAIM_UID, devices=[(HAMI_GPU, 20 * GiB, 30)],
                 procs=[Proc(pid=1, hostpid=TRAIN_PID, mem=[(GiB, GiB, 4 * GiB)], sm_util=[12])])
    (node.hami / "claims" / TRAIN_CLAIM_UID / "notes.txt").write_text("not a region")
    res = node.tick()
    assert shares(res) == {
        # HAMi's device plugin, another GPU: max(20480 MiB / 80 GiB, 25 / 100) = 1/4
        ("chat", "main", None): (PLUGIN_GPU, None, 0.25, None, None),
        # HAMi's DRA driver: memory 20Gi / 80Gi = 1/4, cores 30/100 = 3/10; dominant 3/10
        ("train", "trainer", "train-gpu-x7k2p"): (HAMI_GPU, HAMI, 0.3, 0.25, 0.3),
        # pair-gpus "first" (4Gi, 20 cores: 1/20, 1/5) is a's and b's, half each: 1/40, 1/10;
        # b also has "second" (16Gi, 10 cores: 1/5, 1/10): b = 1/40 + 1/5 = 9/40, 1/10 + 1/10 = 1/5
        ("pair", "a", "pair-gpus"): (HAMI_GPU, HAMI, 0.1, 0.025, 0.1),
        ("pair", "b", "pair-gpus"): (HAMI_GPU, HAMI, 0.225, 0.225, 0.2),
        # NVIDIA's consumable shares: memory 10Gi / 80Gi; the device has no cores: the same share
        ("notebook", "jupyter", "notebook-share"): (NV_SHARE, NVIDIA, 0.125, 0.125, 0.125),
        # a whole time-sliced GPU reserved for two pods: half each
        ("render-a", "render", "render-timesliced"): (NV_SLICED, NVIDIA, 0.5, 0.5, 0.5),
        ("render-b", "render", "render-timesliced"): (NV_SLICED, NVIDIA, 0.5, 0.5, 0.5),
        # nvidia.com/gpu served through DRA: the whole GPU
        ("infer", "app", "infer-extended-resources-r9x4k"): (NV_WHOLE, NVIDIA, 1.0, 1.0, 1.0),
        # Ascend by allocation: memory 16Gi / 64Gi = 1/4, cores 40/100 = 2/5
        ("npu-job", "app", "npu-share"): (NPU, ASCEND, 0.4, 0.25, 0.4),
        # MIG 1g.10gb: max(14/98 multiprocessors, 1/8 memory slices, ...) = 1/7 of its parent
        ("mig-job", "app", "mig-small"): (MIG_PARENT, NVIDIA, pytest.approx(1 / 7), pytest.approx(1 / 7),
                                          pytest.approx(1 / 7)),
        # gpu-monitor's adminAccess claim: no slice, and its process on NV_SLICED no whole-GPU one
    }
    got = rows(res)
    assert all(s.source == "dra" and s.whole_gpu is False for k, s in got.items() if k[2])
    assert got[("train", "trainer", "train-gpu-x7k2p")].claim_uid == TRAIN_CLAIM_UID
    assert got[("notebook", "jupyter", "notebook-share")].alloc_memory_bytes == 10 * GiB
    assert got[("render-a", "render", "render-timesliced")].alloc_memory_bytes is None   # no memory consumed: unknown

    # usage: the claim's region under claims/<uid>/ is the trainer's (it alone consumes the claim)
    train = got[("train", "trainer", "train-gpu-x7k2p")]
    assert (train.hami_memory_used_bytes, train.hami_memory_limit_bytes, train.sm_limit_ratio, train.process_count) == \
        (6 * GiB, 20 * GiB, 0.3, 1)
    assert train.nvml_memory_used_bytes == 6 * GiB and train.sm_util_ratio == 0.12
    # other drivers: NVML through cgroups where it has processes, else nothing known
    assert got[("notebook", "jupyter", "notebook-share")].hami_memory_used_bytes is None
    npu = got[("npu-job", "app", "npu-share")]
    assert (npu.hami_memory_used_bytes, npu.nvml_memory_used_bytes, npu.sm_util_ratio) == (None, None, None)

    # GPU rows: NVML's, with the driver that publishes them; the Ascend NPU by identity alone
    g = {r.gpu_uuid: r for r in res.tick.gpus}
    assert {u: r.driver for u, r in g.items()} == {PLUGIN_GPU: None, HAMI_GPU: HAMI, NV_SHARE: NVIDIA, NV_SLICED: NVIDIA,
                                                    MIG_PARENT: NVIDIA, NV_WHOLE: NVIDIA, NPU: ASCEND}
    ascend = g[NPU]
    assert (ascend.gpu_index, ascend.model, ascend.memory_total_bytes, ascend.slice_count) == (-1, "910B3", 64 * GiB, 1)
    assert (ascend.memory_used_bytes, ascend.sm_util_ratio, ascend.power_watts, ascend.energy_joules) == (None,) * 4
    assert g[HAMI_GPU].slice_count == 3 and g[NV_SLICED].slice_count == 2

    # what the exporter asked: the node's slices by field selector, every claim, with the token, in pages
    paths = {(p, tuple(q.get("fieldSelector", ()))) for p, q, _ in node.api.requests}
    assert paths == {(CLAIMS_PATH, ()), (SLICES_PATH, (f"spec.nodeName={NODE}",))}
    assert {auth for *_, auth in node.api.requests} == {f"Bearer {TOKEN}"}
    assert any("continue" in q for _, q, _ in node.api.requests)
    # the file beside the region is refused by name, costing only itself
    assert [(e, err.reason) for _, _, e, err in res.region_errors] == [(f"claims/{TRAIN_CLAIM_UID}/notes.txt", "bad_name")]


def test_metrics_label_dra_slices_with_their_claim_and_driver(node):
    stats = ExporterStats(tenant="acme")
    stats.record(node.tick())
    text = ExporterCollector(stats).exposition().decode()
    train = [line for line in text.splitlines() if line.startswith("slicemeter_slice_allocation_ratio{")
             and 'pod="train"' in line]
    assert train == ['slicemeter_slice_allocation_ratio{claim="train-gpu-x7k2p",cluster="https://acme.example:6443",'
                     'container="trainer",driver="hami-core-gpu.project-hami.io",gpu_uuid="' + HAMI_GPU + '",'
                     'namespace="team-a",node="gpu-node-1",pod="train",tenant="acme",vdevice_index=""} 0.3']
    chat = [line for line in text.splitlines() if line.startswith("slicemeter_slice_allocation_ratio{")
            and 'pod="chat"' in line]
    assert chat and 'claim=""' in chat[0] and 'driver=""' in chat[0]
    assert 'slicemeter_gpu_allocated_ratio{cluster="https://acme.example:6443",gpu_index="-1",gpu_uuid="npu-node-1-0",' \
           'model="910B3",node="gpu-node-1",tenant="acme"} 0.4' in text


def test_a_claim_recreated_a_pod_restarted_and_a_second_pod_joining_are_followed_tick_by_tick(node):
    first = shares(node.tick(0))
    assert first[("train", "trainer", "train-gpu-x7k2p")][2:] == (0.3, 0.25, 0.3)

    # the claim deleted and made again from its template: a new UID, the same shares, one row
    new_uid = "7d1c2b3a-0e9f-4a8b-8c7d-6e5f4a3b2cff"
    node.claim("train-gpu-x7k2p")["metadata"]["uid"] = new_uid
    res = node.tick(1)
    assert rows(res)[("train", "trainer", "train-gpu-x7k2p")].claim_uid == new_uid
    assert shares(res) == first

    # render-a deleted and started again (a new pod UID) on the same claim: reservedFor follows
    new_pod_uid = "0f1e2d3c-4b5a-4968-8776-6554433221aa"
    node.pod("render-a")["metadata"]["uid"] = new_pod_uid
    with_container_ids(node.pod("render-a"))
    node.write_pods()
    reserved = node.claim("render-timesliced")["status"]["reservedFor"]
    reserved[0]["uid"] = new_pod_uid
    res = node.tick(2)
    assert rows(res)[("render-a", "render", "render-timesliced")].pod_uid == new_pod_uid
    assert shares(res) == first

    # a second pod joins the notebook's claim: 1/8 becomes 1/16 each
    joiner = copy.deepcopy(node.pod("notebook"))
    joiner["metadata"].update(name="notebook-2", uid="0f1e2d3c-4b5a-4968-8776-6554433221bb")
    node.pods["items"].append(with_container_ids(joiner))
    node.write_pods()
    node.claim("notebook-share")["status"]["reservedFor"].append(
        {"resource": "pods", "name": "notebook-2", "uid": joiner["metadata"]["uid"]})
    res = node.tick(3)
    got = shares(res)
    assert got[("notebook", "jupyter", "notebook-share")][2:] == (0.0625, 0.0625, 0.0625)
    assert got[("notebook-2", "jupyter", "notebook-share")][2:] == (0.0625, 0.0625, 0.0625)
    assert {k: v for k, v in got.items() if k[2] != "notebook-share" and k[0] != "notebook-2"} == \
        {k: v for k, v in first.items() if k[2] != "notebook-share"}


def test_a_claim_shared_by_two_containers_splits_its_region_by_their_processes(node):
    """pair-gpus's "first" is a's and b's: the claim's one region is divided by the cgroup of
    each slot's host pid; without that, as the allocation is."""
    a_pid, b_pid = 7400, 7401
    write_cgroup(node.proc, a_pid, node.pod("pair"), "a")
    write_cgroup(node.proc, b_pid, node.pod("pair"), "b")
    node.static.procs[1] += [ProcNow(a_pid, 2 * GiB, 5, 1), ProcNow(b_pid, 3 * GiB, 7, 1)]
    region = claim_region(node.hami, "7d1c2b3a-0e9f-4a8b-8c7d-6e5f4a3b2c02", devices=[(HAMI_GPU, 16 * GiB, 10)],
                          procs=[Proc(pid=1, hostpid=a_pid, mem=[(0, 0, 2 * GiB)], sm_util=[5]),
                                 Proc(pid=2, hostpid=b_pid, mem=[(0, 0, 3 * GiB)], sm_util=[7])])
    got = rows(node.tick())
    assert [(got[("pair", c, "pair-gpus")].hami_memory_used_bytes, got[("pair", c, "pair-gpus")].sm_util_ratio)
            for c in ("a", "b")] == [(2 * GiB, 0.05), (3 * GiB, 0.07)]
    # slots whose host pid no cgroup places: the 5 GiB split as the allocation, a 1/10 : b 9/40 = 4 : 9
    (region / REGION_NAME).write_bytes(bytes(build_region(
        devices=[(HAMI_GPU, 16 * GiB, 10)], procs=[Proc(pid=1, hostpid=0, mem=[(0, 0, 5 * GiB)], sm_util=[13])])) + b"\0")
    got = rows(node.tick(1))
    assert [got[("pair", c, "pair-gpus")].hami_memory_used_bytes for c in ("a", "b")] == \
        [int(5 * GiB * Fraction(4, 13)), int(5 * GiB * Fraction(9, 13))]


def test_a_claims_region_refused_leaves_its_use_unknown_and_is_reported(node):
    d = node.hami / "claims" / TRAIN_CLAIM_UID
    d.mkdir(parents=True)
    for name in (REGION_NAME, "6e0d8c1a-7b2f-4e6d-9a3c-1f2e3d4c5b6a.cache"):
        (d / name).write_bytes(bytes(build_region(devices=[(HAMI_GPU, 20 * GiB, 30)])) + b"\0")
    (node.hami / "claims" / "Not-A-UID").mkdir()
    res = node.tick()
    train = rows(res)[("train", "trainer", "train-gpu-x7k2p")]
    assert train.hami_memory_used_bytes is None and train.alloc_cores_share_ratio == 0.3   # billed, use unknown
    assert sorted((e, err.reason) for _, _, e, err in res.region_errors) == \
        [(f"claims/{TRAIN_CLAIM_UID}", "ambiguous"), ("claims/Not-A-UID", "bad_name")]


def test_dra_is_off_unless_asked_and_its_options_are_checked(tmp_path):
    from slicemeter.common import ConfigError
    from slicemeter.exporter.cli import _dra_fetch

    assert _dra_fetch(exporter_args()) is None
    with pytest.raises(ConfigError, match="--dra-claims-file and --dra-slices-file go together"):
        _dra_fetch(exporter_args("--dra-claims-file", str(DATA / "resourceclaims.json")))
    with pytest.raises(ConfigError, match="--dra-ca: no such file"):
        _dra_fetch(exporter_args("--dra-api", "https://127.0.0.1:1", "--dra-ca", str(tmp_path / "no.crt")))
    assert exporter_args("--dra-api").dra_api == "https://kubernetes.default.svc"
    cache = DraCache(_dra_fetch(exporter_args("--dra-claims-file", str(DATA / "resourceclaims.json"),
                                              "--dra-slices-file", str(DATA / "resourceslices.json"))), "gpu-node-2")
    assert cache.refresh()
    got = cache.get()
    assert {s.name for s in got.slices} == {"gpu-node-2-gpu.nvidia.com-4mzqd", "gpu-node-2-gpu.nvidia.com-counters-b8w2n",
                                            "gpu-node-2-gpu.nvidia.com-mig-h5t9c"}
    assert {c.name for c in got.claims} == {"notebook-share", "render-timesliced", "infer-extended-resources-r9x4k",
                                            "gpu-monitor", "mig-small"}


def test_a_failed_refresh_keeps_the_last_lists_and_counts_the_error(node):
    before = shares(node.tick())
    node.api.status = 403
    assert not node.dra.refresh()
    assert node.dra.errors_total == 1 and len(node.dra.get().claims) == 8
    assert node.pod_cache.refresh()
    res = node.builder.build(TS + 10_000)
    assert res.dra_errors == 1 and shares(res) == before


def test_a_tenant_cannot_point_its_claims_region_outside_the_claims_directory(node, tmp_path):
    """HAMi mounts claims/<uid>/ read-write into the claim's containers: a tenant can put a
    link there (to another claim's region, or any file) or a FIFO. Neither is followed or
    blocks the Tick; the claim's use is unknown and the link is reported."""
    other = tmp_path / "elsewhere.cache"
    other.write_bytes(bytes(build_region(devices=[(HAMI_GPU, 20 * GiB, 30)],
                                         procs=[Proc(pid=1, hostpid=TRAIN_PID, mem=[(0, 0, GiB)], sm_util=[1])])) + b"\0")
    d = node.hami / "claims" / TRAIN_CLAIM_UID
    d.mkdir(parents=True)
    (d / REGION_NAME).symlink_to(other)
    res = node.tick()
    train = rows(res)[("train", "trainer", "train-gpu-x7k2p")]
    assert train.hami_memory_used_bytes is None and train.alloc_cores_share_ratio == 0.3
    assert [(e, err.reason) for _, _, e, err in res.region_errors] == [(f"claims/{TRAIN_CLAIM_UID}", "symlink")]
    (d / REGION_NAME).unlink()
    os.mkfifo(d / REGION_NAME)
    res = node.tick(1)
    assert rows(res)[("train", "trainer", "train-gpu-x7k2p")].hami_memory_used_bytes is None
    assert [(e, err.reason) for _, _, e, err in res.region_errors] == [(f"claims/{TRAIN_CLAIM_UID}", "not_regular")]


def test_the_exporter_command_reads_claims_and_slices_from_files_into_its_tick(tmp_path, capsys):
    """`slicemeter exporter --once` on a simulated node (examples/demo.yaml's gpu-node-1) with the
    fixtures' ResourceClaims and ResourceSlices on that node: its device-plugin slices and the
    NPU that only a ResourceSlice publishes are one Tick."""
    from slicemeter.cli import main

    claims, slices = tmp_path / "claims.json", tmp_path / "slices.json"
    claims.write_text(json.dumps(on_one_node(load("resourceclaims.json"))))
    slices.write_text(json.dumps(on_one_node(load("resourceslices.json"))))
    demo = Path(__file__).resolve().parent.parent / "examples" / "demo.yaml"
    assert main(["exporter", "--simulate", str(demo), "--node", NODE, "--hami-dir", str(tmp_path / "h"), "--once",
                 "--dra-claims-file", str(claims), "--dra-slices-file", str(slices)]) == 0
    tick = json.loads(capsys.readouterr().out)
    npu = [g for g in tick["gpus"] if g["gpu_uuid"] == NPU]
    assert npu == [{**npu[0], "gpu_index": -1, "model": "910B3", "memory_total_bytes": 64 * GiB, "driver": ASCEND,
                    "memory_used_bytes": None, "sm_util_ratio": None, "slice_count": 0}]
    assert any(s["source"] == "hami" and s["claim"] is None for s in tick["slices"])


def test_the_exporters_tick_of_the_dra_node_bills_an_hour_by_hand(node, tmp_path):
    """The same Tick, sent every minute for an hour, through ingest's writer and `slicemeter
    export`: each container's allocation GPU-hours are its shares above, each tenant's hour is
    worked by hand at the catalog's prices (A100 2.40, 910B3 1.60), and on every GPU what its
    slices were charged + its idle = its price, to the cent."""
    from slicemeter.cli import main
    from slicemeter.store import connect
    from slicemeter.testkit.cb_rows import ACME, add_tenants
    from slicemeter.testkit.ingest_helpers import an_hour_of, store_ticks

    claim_region(node.hami, TRAIN_CLAIM_UID, devices=[(HAMI_GPU, 20 * GiB, 30)],
                 procs=[Proc(pid=1, hostpid=TRAIN_PID, mem=[(GiB, GiB, 4 * GiB)], sm_util=[12])])
    ticks = an_hour_of(node.tick().tick, ACME)
    hour_ms = ticks[0].ts_ms
    db = tmp_path / "dra.duckdb"
    con = connect(db)
    add_tenants(con)
    con.execute("INSERT INTO tenant_namespace_overrides VALUES (?, 'team-b', 'globex')", [ACME])
    store_ticks(con, ticks)
    con.close()
    month = dt.datetime.fromtimestamp(hour_ms / 1000, dt.timezone.utc).strftime("%Y-%m")
    assert main(["export", "--db", str(db), "--month", month, "--out", str(tmp_path / "out")]) == 0
    detail = pq.read_table(tmp_path / "out" / f"detail-{month}.parquet").to_pylist()
    usage = {(r["pod"], r["container"]): r for r in detail if r["kind"] == "usage"}
    assert {k: r["gpu_hours_allocated"] for k, r in usage.items()} == {
        ("chat", "main"): Decimal("0.25"), ("train", "trainer"): Decimal("0.3"), ("pair", "a"): Decimal("0.1"),
        ("pair", "b"): Decimal("0.225"), ("notebook", "jupyter"): Decimal("0.125"),
        ("render-a", "render"): Decimal("0.5"), ("render-b", "render"): Decimal("0.5"),
        ("infer", "app"): Decimal("1"), ("npu-job", "app"): Decimal("0.4"), ("mig-job", "app"): Decimal("0.1429")}
    # acme: chat 0.60 + train 0.72 + pair 0.24 + 0.54 + infer 2.40 + mig 2.40 / 7 = 0.34 (rounded)
    # + npu-job 0.4 x 1.60 = 0.64; globex (team-b): notebook 0.30 + render-a 1.20 + render-b 1.20
    charges = {t: sum((r["charge"] for r in detail if r["tenant"] == t), Decimal(0)) for t in ("acme", "globex")}
    assert charges == {"acme": Decimal("5.48"), "globex": Decimal("2.70")}
    # six A100s and the Ascend for the hour: 6 x 2.40 + 1.60; idle is the rest, 7.82
    assert sum(r["cost"] for r in detail) == Decimal("16.00")
    assert sum(r["cost"] for r in detail if r["kind"] == "idle") == Decimal("7.82")
    prices = {u: Decimal("2.40") for u in (PLUGIN_GPU, HAMI_GPU, NV_SHARE, NV_SLICED, MIG_PARENT, NV_WHOLE)}
    for uuid, price in prices.items() | {(NPU, Decimal("1.60"))}:
        mine = [r for r in detail if r["gpu_uuid"] == uuid]
        assert sum(r["cost"] for r in mine) == price, uuid
    assert not any(r["pod"] == "gpu-monitor" for r in detail)   # adminAccess: not billed


# ---- device health from the pod status (core/v1 ContainerStatus.allocatedResourcesStatus)

def report_health(p: dict, container: str, resource: str, resource_id: str, health: str) -> None:
    """The kubelet's report on a container's device, shaped as k8s.io/api core/v1 ResourceStatus
    and ResourceHealth: `{name, resources: [{resourceID, health}]}`."""
    status = next(cs for cs in p["status"]["containerStatuses"] if cs["name"] == container)
    status.setdefault("allocatedResourcesStatus", []).append(
        {"name": resource, "resources": [{"resourceID": resource_id, "health": health}]})


def reported_node(node) -> None:
    """The Ascend NPU (DRA) and HAMi's device-plugin GPU reported Unhealthy, NVIDIA's shared
    GPU (DRA) Unknown; a device plugin ID naming no GPU of the node is left out."""
    report_health(node.pod("npu-job"), "app", "claim:npu", f"{ASCEND}/npu-node-1/npu-0-0", "Unhealthy")
    report_health(node.pod("chat"), "main", "nvidia.com/gpu", f"{PLUGIN_GPU}-0", "Unhealthy")   # HAMi's device id
    report_health(node.pod("notebook"), "jupyter", "claim:gpu", f"{NVIDIA}/gpu-node-2/gpu-0", "Unknown")
    report_health(node.pod("train"), "trainer", "huawei.com/Ascend910", "Ascend910-3", "Unhealthy")
    node.write_pods()


def test_kubernetes_device_health_marks_the_row_of_any_vendors_device(node):
    res = node.tick()
    assert {g.device_health for g in res.tick.gpus} == {None}     # nothing reported
    reported_node(node)
    res = node.tick()
    health = {g.gpu_uuid: g.device_health for g in res.tick.gpus}
    assert health.pop(NPU) == 1 and health.pop(PLUGIN_GPU) == 1 and health.pop(NV_SHARE) == 2
    assert set(health.values()) == {None}
    from slicemeter import tick as wire
    decoded = wire.decode(wire.encode_ticks([res.tick])).gpus
    assert dict(zip(decoded.column("gpu_uuid").to_pylist(), decoded.column("device_health").to_pylist()))[NPU] == 1


def test_unhealthy_devices_are_degraded_hours_credited_and_on_the_gpus_page(node, tmp_path, monkeypatch):
    """An hour of Ticks with the Ascend NPU (DRA) and the device-plugin GPU reported Unhealthy
    and NVIDIA's shared GPU Unknown: the first two GPU-hours are degraded and their slices'
    charges credited in full under `credits: {degraded_hour: "1.0"}`; the Unknown hour is
    shown on the GPUs page, never credited."""
    from slicemeter.cli import main
    from slicemeter.store import connect
    from slicemeter.testkit.cb_rows import ACME, add_tenants
    from slicemeter.testkit.dashboard_app import run_app
    from slicemeter.testkit.ingest_helpers import an_hour_of, store_ticks

    reported_node(node)
    ticks = an_hour_of(node.tick().tick, ACME)
    hour_ms = ticks[0].ts_ms
    db = tmp_path / "health.duckdb"
    con = connect(db)
    add_tenants(con)
    store_ticks(con, ticks)
    got = dict(con.execute("SELECT gpu_uuid, (unhealthy_s, health_unknown_s) FROM gpu_hour").fetchall())
    assert got[NPU] == got[PLUGIN_GPU] == (3600.0, 0.0) and got[NV_SHARE] == (0.0, 3600.0)
    assert {v for k, v in got.items() if k not in (NPU, PLUGIN_GPU, NV_SHARE)} == {(0.0, 0.0)}
    con.close()
    month = dt.datetime.fromtimestamp(hour_ms / 1000, dt.timezone.utc).strftime("%Y-%m")
    prices = tmp_path / "prices.yaml"
    prices.write_text((Path(__file__).parent.parent / "examples" / "prices.yaml").read_text()
                      + 'credits: {degraded_hour: "1.0"}\n')
    assert main(["export", "--db", str(db), "--month", month, "--out", str(tmp_path / "out"),
                 "--prices", str(prices)]) == 0
    detail = pq.read_table(tmp_path / "out" / f"detail-{month}.parquet").to_pylist()
    credits = {(r["pod"], r["gpu_uuid"]): r["cost"] for r in detail if r["kind"] == "credit"}
    # chat: a quarter of a $2.40 GPU-hour; npu-job: 0.4 of a $1.60 one (the hand-worked figures above)
    assert credits == {("chat", PLUGIN_GPU): Decimal("-0.60"), ("npu-job", NPU): Decimal("-0.64")}

    at = run_app(db, monkeypatch, "gpus")
    (events,) = [d.value for d in at.dataframe if {"what", "gpu_uuid", "tenants"} <= set(d.value.columns)]
    shown = {r.gpu_uuid: (r.what, bool(r.degraded)) for r in events.itertuples()}
    assert shown == {NPU: ("Unhealthy 3600 s", True), PLUGIN_GPU: ("Unhealthy 3600 s", True),
                     NV_SHARE: ("health Unknown 3600 s", False)}


def test_a_drivers_healthy_condition_on_the_claim_marks_its_device(node):
    """resource/v1 AllocatedDeviceStatus on the claim, from the recorded API server."""
    node.claim("npu-share")["status"]["devices"] = [
        {"driver": ASCEND, "pool": "npu-node-1", "device": "npu-0-0",
         "conditions": [{"type": "Healthy", "status": "False", "reason": "HbmEccError", "message": "",
                         "lastTransitionTime": "2026-11-20T09:00:00Z"}]}]
    health = {g.gpu_uuid: g.device_health for g in node.tick().tick.gpus}
    assert health.pop(NPU) == 1 and set(health.values()) == {None}
