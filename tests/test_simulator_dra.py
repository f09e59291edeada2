"""Simulated pods granted through DRA: the ResourceClaims, ResourceSlices and pods a node serves
have the shapes of the upstream fixtures (tests/data/dra/), the exporter's DRA source reads the
shares the scenario declares from them, HAMi's claim regions parse with the exporter's parser,
and backfilled history carries the same claims, drivers and shares."""
from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from slicemeter.common import MiB
from slicemeter.exporter.sources import dra
from slicemeter.exporter.sources.hami import Region, parse_region_bytes
from slicemeter.simulator.node import SimulatedNode
from slicemeter.simulator.scenario import ScenarioError, load_scenario, parse_scenario
from slicemeter.simulator.timetravel import generate

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "dra"
TS = 1_795_000_000_000
HAMI, NVIDIA, ASCEND = "hami-core-gpu.project-hami.io", "gpu.nvidia.com", "ascend.project-hami.io"

TENANTS = """
tenants:
  - name: acme
    display_name: ACME
    kamaji: {namespace: tenant-acme, name: acme}
    api_server: https://acme.tenants.example:6443
    cost_center: CC-1
"""
SCENARIO = TENANTS + """
nodes:
  - name: gpu-node-dra
    tenant: acme
    gpus:
      - {model: "910B3", dra: ascend}
      - {model: "NVIDIA A100-SXM4-80GB", dra: hami-core}
      - {model: "NVIDIA A100-SXM4-80GB", dra: nvidia-shares}
      - {model: "NVIDIA A100-SXM4-80GB", count: 2, dra: nvidia}
      - {model: "NVIDIA A100-SXM4-80GB"}
    pods:
      - name: train
        namespace: team-a
        containers:
          - {name: trainer, dra: {driver: hami-core, memory: 20480, cores: 30}, workload: steady-training}
          - {name: log-shipper}
      - name: defaults
        namespace: team-a
        containers:
          - {name: app, dra: {driver: hami-core, memory: 8192}, workload: steady-training}
      - name: notebook
        namespace: team-b
        containers:
          - {name: jupyter, dra: {driver: nvidia, memory: 10240}, workload: steady-training}
      - name: render-a
        namespace: team-b
        containers:
          - {name: render, dra: {driver: nvidia, claim: render-timesliced}, workload: steady-training}
      - name: render-b
        namespace: team-b
        containers:
          - {name: render, dra: {driver: nvidia, claim: render-timesliced}, workload: steady-training}
      - name: infer
        namespace: team-c
        containers:
          - {name: app, dra: {driver: nvidia, extended: true}, workload: steady-training}
      - name: npu-job
        namespace: team-c
        containers:
          - {name: app, dra: {driver: ascend, memory: 16384, cores: 40}, workload: steady-training}
      - name: plugin
        namespace: team-a
        containers:
          - {name: app, resources: {nvidia.com/gpumem: 8192, nvidia.com/gpucores: 20}, workload: steady-training}
"""
# (pod, container) -> the share of its device the scenario declares, as docs/dra.md computes it
DECLARED = {
    ("train", "trainer"): Fraction(3, 10),          # max(20Gi / 80Gi, 30 / 100)
    ("defaults", "app"): Fraction(6, 10),           # HAMi's plugin: no cores asked, SM limit 60
    ("notebook", "jupyter"): Fraction(1, 8),        # ConsumableShares: 10Gi of 80Gi
    ("render-a", "render"): Fraction(1, 2),         # one whole GPU time-sliced between two pods
    ("render-b", "render"): Fraction(1, 2),
    ("infer", "app"): Fraction(1),                  # nvidia.com/gpu served by DRA: a whole GPU
    ("npu-job", "app"): Fraction(2, 5),             # max(16Gi / 64Gi, 40 / 100)
}


@pytest.fixture(scope="module")
def scenario():
    return parse_scenario(SCENARIO, "dra.yaml")


@pytest.fixture(scope="module")
def node(scenario, tmp_path_factory):
    sim = SimulatedNode(scenario, "gpu-node-dra", tmp_path_factory.mktemp("hami"))
    sim.advance(TS)
    return sim


def fixture(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def shape(value):
    """The keys at every level (list items merged), leaves by JSON type."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        merged: dict | set = {}
        for item in value:
            s = shape(item)
            merged = {**merged, **s} if isinstance(s, dict) else {s}
        return [merged]
    return type(value).__name__


def by_name(items: list[dict], name: str) -> dict:
    return next(i for i in items if i.get("name", i.get("metadata", {}).get("name")) == name)


def test_slices_have_the_shape_of_each_drivers_upstream_slice(node):
    ours, theirs = node.resource_slices_json(), fixture("resourceslices.json")
    assert shape({**ours, "items": []}) == shape({**theirs, "items": []})
    mine = {s["spec"]["driver"]: s for s in ours["items"]}
    assert set(mine) == {HAMI, NVIDIA, ASCEND}
    for item in theirs["items"]:
        if "devices" in item["spec"]:
            drv = item["spec"]["driver"]
            assert shape({**mine[drv], "spec": {**mine[drv]["spec"], "devices": []}}) == \
                shape({**item, "spec": {**item["spec"], "devices": []}}), drv
    devices = {d["name"]: d for s in ours["items"] for d in s["spec"]["devices"]}
    upstream = {d["name"]: d for s in theirs["items"] for d in s["spec"].get("devices", [])}
    # HAMi's GPU, NVIDIA's shareable and whole GPUs, the Ascend NPU
    for mine_name, their_name in (("hami-gpu-0", "hami-gpu-0"), ("gpu-1", "gpu-0"), ("gpu-2", "gpu-1"),
                                  ("npu-0-0", "npu-0-0")):
        assert shape(devices[mine_name]) == shape(upstream[their_name]), mine_name
    assert devices["hami-gpu-0"]["capacity"]["memory"]["value"] == "80Gi"
    assert devices["npu-0-0"]["attributes"]["model"] == {"string": "910B3"}


def test_claims_have_the_shape_of_the_upstream_claims(node):
    ours = {c["metadata"]["name"]: c for c in node.resource_claims_json()["items"]}
    theirs = {c["metadata"]["name"]: c for c in fixture("resourceclaims.json")["items"]}
    assert shape({**node.resource_claims_json(), "items": []}) == shape({**fixture("resourceclaims.json"), "items": []})
    generated = theirs["train-gpu-x7k2p"]["metadata"]
    mine = {ours[n]["metadata"]["ownerReferences"][0]["name"] if "ownerReferences" in ours[n]["metadata"] else n: ours[n]
            for n in ours}
    for pod, upstream, metadata in (("train", "train-gpu-x7k2p", generated),
                                    ("notebook", "notebook-share", generated),
                                    ("render-timesliced", "render-timesliced", theirs["render-timesliced"]["metadata"]),
                                    ("infer", "infer-extended-resources-r9x4k", None),
                                    ("npu-job", "npu-share", generated)):
        claim = mine[pod]
        want = theirs[upstream]
        assert shape(claim["spec"]) == shape(want["spec"]), pod
        assert shape(claim["status"]) == shape(want["status"]), pod
        assert shape(claim["metadata"]) == shape(metadata or want["metadata"]), pod
        assert set(claim) == set(want)
    assert mine["train"]["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"] == \
        {"cores": "30", "memory": "20Gi"}
    assert [r["name"] for r in mine["render-timesliced"]["status"]["reservedFor"]] == ["render-a", "render-b"]


def test_pods_name_their_claims_as_upstream_pods_do(node):
    pods = {p["metadata"]["name"]: p for p in node.pods()["items"]}
    theirs = {p["metadata"]["name"]: p for p in fixture("pods.json")["items"]}
    for pod, upstream in (("train", "train"), ("render-a", "render-a"), ("infer", "infer")):
        mine, want = pods[pod], theirs[upstream]
        for part in ("resourceClaims",):
            assert shape(mine["spec"].get(part)) == shape(want["spec"].get(part)), pod
        for part in ("resourceClaimStatuses", "extendedResourceClaimStatus"):
            assert shape(mine["status"].get(part)) == shape(want["status"].get(part)), pod
        assert shape(mine["spec"]["containers"][0]["resources"]) == shape(want["spec"]["containers"][0]["resources"])
    # a pod on DRA only has no HAMi annotation; the device plugin's still has it
    assert "hami.io/vgpu-devices-allocated" not in pods["train"]["metadata"]["annotations"]
    assert pods["plugin"]["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].count(",NVIDIA,8192,20:") == 1


def test_the_exporters_dra_source_reads_the_declared_shares(node):
    claims, slices, pods = (dra.parse_claims(node.resource_claims_json()),
                            dra.parse_resource_slices(node.resource_slices_json()), dra.parse_pods(node.pods()))
    assert (claims.errors, slices.errors, pods.errors) == ((), (), ())
    got = {(s.pod, s.container): s for s in dra.allocation_slices(claims.items, slices.items, pods.items)}
    assert {k: s.share for k, s in got.items()} == DECLARED
    gpus = {g.uuid: g for g in node.gpus}
    for (pod, ctr), s in got.items():
        c = next(c for p in node.spec.pods if p.name == pod for c in p.containers if c.name == ctr)
        assert s.device_uuid == node.gpus[c.devices[0]].uuid and s.model == gpus[s.device_uuid].model
    assert got[("defaults", "app")].basis is dra.Basis.HAMI_DEFAULT
    assert got[("npu-job", "app")].driver == ASCEND and got[("npu-job", "app")].model == "910B3"


def test_hami_claim_regions_parse_with_the_exporters_parser(node):
    claims = {c["metadata"]["uid"]: c for c in node.resource_claims_json()["items"]}
    regions = sorted((node.hami_dir / "claims").iterdir())
    hami_claims = {uid for uid, c in claims.items()
                   if c["status"]["allocation"]["devices"]["results"][0]["driver"] == HAMI}
    assert {d.name for d in regions} == hami_claims and len(hami_claims) == 2
    hami_gpu = next(g for g in node.gpus if g.dra == "hami-core")
    limits = {}
    for d in regions:
        (f,) = d.glob("*.cache")
        region = parse_region_bytes(f.read_bytes())
        assert isinstance(region, Region), region
        (dev,) = region.devices
        assert dev.uuid == hami_gpu.uuid and region.proc_num == 1 and dev.used_bytes > 0
        limits[claims[d.name]["metadata"]["ownerReferences"][0]["name"]] = (dev.limit_bytes, dev.sm_limit_pct)
    # what the claim consumed; the plugin's SM limit of 60 where it asked for no cores
    assert limits == {"train": (20480 * MiB, 30), "defaults": (8192 * MiB, 60)}
    # the device plugin's container keeps its region under containers/, nobody else has one
    assert [p.name.split("_")[1] for p in (node.hami_dir / "containers").iterdir()] == ["app"]


def test_nvml_does_not_list_the_npu(node):
    nv = node.nvml
    nv.nvmlInit()
    uuids = [nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)) for i in range(nv.nvmlDeviceGetCount())]
    assert uuids == [g.uuid for g in node.gpus if g.model != "910B3"] and len(uuids) == 5


def test_history_carries_claims_drivers_and_shares(scenario, node):
    ((_, gpus, slices),) = list(generate(scenario, TS, TS + 1, seed=0))
    rows = {(r["pod"], r["container"]): r for r in slices.to_pylist()}
    served = {(s.pod, s.container): s for s in dra.allocation_slices(
        dra.parse_claims(node.resource_claims_json()).items, dra.parse_resource_slices(node.resource_slices_json()).items,
        dra.parse_pods(node.pods()).items)}
    assert set(served) == {k for k, r in rows.items() if r["source"] == "dra"}
    for key, s in served.items():
        r = rows[key]
        assert (r["claim"], r["claim_uid"], r["driver"], r["gpu_uuid"]) == (s.claim, s.claim_uid, s.driver, s.device_uuid)
        assert max(r["alloc_mem_share_ratio"], r["alloc_cores_share_ratio"]) == pytest.approx(float(s.share))
        assert r["whole_gpu"] is False
    assert (rows[("notebook", "jupyter")]["alloc_mem_share_ratio"], rows[("notebook", "jupyter")]["alloc_cores_share_ratio"]) \
        == (0.125, 0.125)
    assert rows[("render-a", "render")]["alloc_memory_bytes"] == 40 * 1024 * MiB
    # HAMi's DRA regions give usage like the device plugin's; NVIDIA's is NVML's own; the NPU's unknown
    assert rows[("train", "trainer")]["hami_memory_limit_bytes"] == 20480 * MiB
    assert rows[("train", "trainer")]["sm_limit_ratio"] == pytest.approx(0.3)
    assert rows[("notebook", "jupyter")]["hami_memory_used_bytes"] is None
    assert rows[("notebook", "jupyter")]["nvml_memory_used_bytes"] > 0
    npu = rows[("npu-job", "app")]
    assert [npu[k] for k in ("sm_util_ratio", "nvml_memory_used_bytes", "hami_memory_used_bytes", "process_count",
                             "usage_verified")] == [None] * 5
    plugin = rows[("plugin", "app")]
    assert (plugin["source"], plugin["claim"], plugin["driver"], plugin["alloc_mem_share_ratio"]) == ("hami", None, None, None)
    g = {r["gpu_uuid"]: r for r in gpus.to_pylist()}
    npu_row = g["gpu-node-dra-0"]
    assert (npu_row["gpu_index"], npu_row["model"], npu_row["memory_total_bytes"], npu_row["driver"]) == \
        (-1, "910B3", 64 << 30, ASCEND)
    assert [npu_row[k] for k in ("memory_used_bytes", "sm_util_ratio", "power_watts", "energy_joules")] == [None] * 4
    assert {r["driver"] for r in gpus.to_pylist()} == {HAMI, NVIDIA, ASCEND, None}


def test_batch_runs_on_dra_get_their_own_claims(tmp_path):
    s = parse_scenario(TENANTS + """
nodes:
  - name: n1
    tenant: acme
    gpus: [{model: "NVIDIA A100-SXM4-80GB", dra: hami-core}]
    pods:
      - name: etl
        containers:
          - {name: job, dra: {driver: hami-core, memory: 4096, cores: 10},
             workload: {pattern: batch-jobs, jobs_per_day: 24, duration_min: 60}}
""")
    day = 86_400_000
    rows = [r for _, _, t in generate(s, TS, TS + day, 600) for r in t.to_pylist()]
    runs = {r["pod"]: r["claim"] for r in rows}
    assert len(runs) >= 20 and len(set(runs.values())) == len(runs)
    assert all(claim.startswith(pod + "-job-") for pod, claim in runs.items())
    sim = SimulatedNode(s, "n1", tmp_path)
    sim.advance(rows[0]["ts_ms"])
    (claim,) = sim.resource_claims_json()["items"]
    assert claim["metadata"]["name"] == rows[0]["claim"] and claim["metadata"]["uid"] == rows[0]["claim_uid"]


@pytest.mark.parametrize("gpus, container, where, message", [
    ('[{model: "NVIDIA L4", dra: nvidia}]', '{name: c, dra: {driver: nvidia, cores: 30}, workload: steady-training}',
     "nodes[0].pods[0].containers[0].dra.cores", "NVIDIA's driver shares a GPU by memory only"),
    ('[{model: "NVIDIA L4", dra: hami-core}]',
     '{name: c, dra: {driver: hami-core}, resources: {nvidia.com/gpumem: 10}, workload: steady-training}',
     "nodes[0].pods[0].containers[0].dra", "give resources (HAMi's device plugin) or dra, not both"),
    ('[{model: "910B3"}]', '{name: c, workload: steady-training}',
     "nodes[0].gpus[0].dra", "is published by HAMi's Ascend driver: dra: ascend"),
    ('[{model: "NVIDIA L4", dra: ascend}]', '{name: c, workload: steady-training}',
     "nodes[0].gpus[0].dra", "dra: ascend publishes Ascend NPUs"),
    ('[{model: "910B3", dra: ascend}]', '{name: c, dra: {driver: ascend, cores: 10}, workload: steady-training}',
     "nodes[0].pods[0].containers[0].dra.memory", "an Ascend claim consumes memory"),
    ('[{model: "NVIDIA L4", dra: hami-core}]', '{name: c, dra: {driver: hami-core, memory: 30000}, workload: steady-training}',
     "nodes[0].pods[0].containers[0].dra", "no room on node n1: no DRA hami-core device with 30000 MiB"),
    ('[{model: "NVIDIA L4", dra: hami-core}]',
     '{name: c, resources: {nvidia.com/gpumem: 1024}, devices: [0], workload: steady-training}',
     "nodes[0].pods[0].containers[0].devices", "is published through DRA (hami-core)"),
    ('[{model: "NVIDIA L4", dra: nvidia}]', '{name: c, dra: {driver: nvidia, claim: shared}, workload: batch-jobs}',
     "nodes[0].pods[0].containers[0].dra.claim", "a claim shared by name needs pods that stay"),
    ('[{model: "NVIDIA L4", dra: nvidia}]', '{name: c, dra: {driver: hami-core, memory: 10}, workload: steady-training}',
     "nodes[0].pods[0].containers[0].dra", "no DRA hami-core device"),
    ('[{model: "NVIDIA L4", dra: nvidia}]', '{name: c, dra: {driver: amd}, workload: steady-training}',
     "nodes[0].pods[0].containers[0].dra.driver", "unknown DRA driver 'amd'"),
])
def test_bad_dra_scenarios_name_the_key(gpus, container, where, message):
    text = TENANTS + f"""
nodes:
  - name: n1
    tenant: acme
    gpus: {gpus}
    pods:
      - name: p
        containers:
          - {container}
"""
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, "s.yaml")
    assert "s.yaml:" in str(exc.value) and where in str(exc.value) and message in str(exc.value), str(exc.value)


def test_simulate_writes_claims_and_slices_beside_the_pod_lists(tmp_path):
    pods_dir = tmp_path / "pods"
    res = subprocess.run(
        [str(Path(sys.executable).parent / "slicemeter"), "simulate", "--scenario", str(REPO / "examples/demo.yaml"),
         "--hami-dir", str(tmp_path / "hami"), "--pods-dir", str(pods_dir), "--ticks", "1",
         "--start", "2026-11-18T10:00:00Z"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    claims = json.loads((pods_dir / "resourceclaims.json").read_text())
    slices = json.loads((pods_dir / "resourceslices.json").read_text())
    assert (claims["kind"], slices["kind"]) == ("ResourceClaimList", "ResourceSliceList")
    demo = load_scenario(REPO / "examples/demo.yaml")
    sim = SimulatedNode(demo, "gpu-node-dra", tmp_path / "again")
    sim.advance(int(dt.datetime(2026, 11, 18, 10, tzinfo=dt.timezone.utc).timestamp() * 1000))
    assert claims["items"] == sim.resource_claims_json()["items"]
    assert slices["items"] == sim.resource_slices_json()["items"]
    assert {s["spec"]["driver"] for s in slices["items"]} == {HAMI, NVIDIA, ASCEND}
    # the demo's DRA node: HAMi's claim regions under its hook path, the time-sliced claim reserved for two
    assert len(list((tmp_path / "hami" / "gpu-node-dra" / "claims").iterdir())) == 2
    shared = next(c for c in claims["items"] if c["metadata"]["name"] == "render-timesliced")
    assert len(shared["status"]["reservedFor"]) == 2


def test_the_simulated_exporter_meters_the_dra_node_in_one_tick(tmp_path):
    """`slicemeter exporter --simulate` on the demo's DRA node: its claims and slices reach the
    exporter's DRA source, each container's shares are the claim's, the NPU is a GPU row of
    identity only, and a device-plugin node offers no DRA source at all."""
    res = subprocess.run(
        [str(Path(sys.executable).parent / "slicemeter"), "exporter", "--simulate", str(REPO / "examples/demo.yaml"),
         "--node", "gpu-node-dra", "--hami-dir", str(tmp_path / "hami"), "--once", "--port", "0"],
        capture_output=True, text=True, cwd=REPO, timeout=120, env={**os.environ, "SLICEMETER_NOW": "2026-11-18T10:00Z"})
    assert res.returncode == 0, res.stderr
    tick = json.loads(res.stdout)
    shares = {(s["pod"], s["driver"]): (s["alloc_mem_share_ratio"], s["alloc_cores_share_ratio"])
              for s in tick["slices"] if s["source"] == "dra"}
    assert shares[("render-a", NVIDIA)] == shares[("render-b", NVIDIA)] == (0.5, 0.5)   # one time-sliced claim
    assert {d for _, d in shares} == {HAMI, NVIDIA, ASCEND}
    assert all(s["claim"] and s["claim_uid"] for s in tick["slices"] if s["source"] == "dra")
    npu, = [g for g in tick["gpus"] if g["driver"] == ASCEND]
    assert (npu["gpu_index"], npu["model"], npu["sm_util_ratio"], npu["temperature_celsius"]) == (-1, "910B3", None, None)
    hami_used = [s["hami_memory_used_bytes"] for s in tick["slices"] if s["driver"] == HAMI]
    assert hami_used and all(u is not None and u > 0 for u in hami_used)   # read from claims/<uid>/ regions
    demo = load_scenario(REPO / "examples/demo.yaml")
    assert SimulatedNode(demo, "gpu-node-1", tmp_path / "plain").dra is None
