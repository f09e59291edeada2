"""The simulator writes what HAMi-core and HAMi write, by version; the exporter reads it.

Region bytes are checked at the offsets of HAMi-core's own structs (testkit/hami_bytes.py,
commits cited there), annotations against HAMi's EncodePodSingleDevice / Resourcereqs
(pkg/device/devices.go at v2.8.3 8f039ad2... and v2.10.0 4707fb02...).
"""
from __future__ import annotations

import struct

import pytest

from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import PodCache
from slicemeter.exporter.assemble.shares import allocation_share
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.testkit.hami_bytes import LAYOUTS, file_size
from slicemeter.simulator.node import SimulatedNode
from slicemeter.common import MiB
from slicemeter.simulator.scenario import ScenarioError, parse_scenario
from slicemeter.simulator.timetravel import generate

T0 = 1_795_000_000_000

SCENARIO = """
tenants:
  - {{name: acme, display_name: ACME, kamaji: {{namespace: t, name: acme}}, api_server: "https://acme:6443", cost_center: C}}
nodes:
  - name: n
    tenant: acme
    {node_opts}
    gpus: [{{model: "NVIDIA A100-SXM4-80GB", count: 2}}]
    pods:
      - name: cache
        namespace: ml
        init_containers:
          - name: warmup
            resources: {{nvidia.com/gpumem: 4096, nvidia.com/gpucores: 10}}
          - name: fetch
        containers:
          - name: server
            resources: {{nvidia.com/gpumem: 8192}}
            workload: {{pattern: steady-training, level: 0.3}}
            {ctr_opts}
          - name: proxy
      - name: train
        namespace: ml
        containers:
          - name: main
            resources: {{nvidia.com/gpumem: 20480, nvidia.com/gpucores: 40}}
            workload: {{pattern: steady-training, level: 0.8}}
"""


def scenario(node_opts: str = "", ctr_opts: str = ""):
    return parse_scenario(SCENARIO.format(node_opts=node_opts or "count: 1", ctr_opts=ctr_opts or "processes: 1"))


def run(tmp_path, scn, ts=T0):
    sim = SimulatedNode(scn, "n", tmp_path / "hami")
    sim.nvml.nvmlInit()
    sim.advance(ts)
    cache = PodCache(sim.pods)
    cache.refresh()
    builder = TickBuilder("n", sim.cluster, NvmlReader(sim.nvml, initialised=True), str(tmp_path / "hami"), cache,
                          proc_root=None)
    return sim, builder.build(ts)


def region_file(tmp_path, sim, container):
    pod = next(p for p in sim.spec.pods if any(c.name == container for c in p.containers))
    (path,) = (tmp_path / "hami" / "containers" / f"{pod.uid}_{container}").glob("*.cache")
    return path.read_bytes()


def slot_field(data, key, i, name, dev=0, kind="used", field_name="total"):
    lay = LAYOUTS[key]
    if kind == "used":
        return struct.unpack_from("<Q", data, lay.slot_at(i, "used") + dev * lay.mem.size + lay.mem.offsets[field_name])[0]
    if kind == "util":
        return struct.unpack_from("<Q", data, lay.slot_at(i, "device_util") + dev * lay.util.size + lay.util.offsets["sm_util"])[0]
    if kind == "monitor":
        return struct.unpack_from("<Q", data, lay.slot_at(i, "monitorused") + 8 * dev)[0]
    return struct.unpack_from("<Q" if name == "seqlock" else "<i", data, lay.slot_at(i, name))[0]


@pytest.mark.parametrize("core", ["v0", "1.1", "1.2", "1.1-2026-03"])
def test_region_bytes_at_hami_cores_offsets_and_sizeof_plus_one(tmp_path, core):
    sim, _ = run(tmp_path, scenario(f'hami_core: "{core}"'))
    data = region_file(tmp_path, sim, "main")
    key = {"1.1-2026-03": "1.1-moved"}.get(core, core)
    lay = LAYOUTS[key]
    assert len(data) == file_size(key) == lay.region.size + 1
    if lay.version:
        assert struct.unpack_from("<II", data, lay.at("major_version")) == lay.version
    gpu = sim.gpus[sim.spec.pods[1].containers[0].devices[0]].uuid
    assert data[lay.at("uuids") : lay.at("uuids") + len(gpu)] == gpu.encode()
    assert struct.unpack_from("<Q", data, lay.at("limit"))[0] == 20480 * MiB
    assert struct.unpack_from("<Q", data, lay.at("sm_limit"))[0] == 40
    assert struct.unpack_from("<i", data, lay.at("proc_num"))[0] == 1
    assert 0 < slot_field(data, key, 0, "", kind="used") <= 20480 * MiB
    if "seqlock" in lay.slot.offsets:
        assert slot_field(data, key, 0, "seqlock", kind="field") % 2 == 0


def test_no_core_limit_is_written_as_100(tmp_path):
    sim, res = run(tmp_path, scenario())
    data = region_file(tmp_path, sim, "server")
    assert struct.unpack_from("<Q", data, LAYOUTS["1.2"].at("sm_limit"))[0] == 100
    s = next(s for s in res.tick.slices if s.container == "server")
    assert s.source == "hami" and s.sm_limit_ratio is None and s.alloc_cores_ratio == 0.0
    assert allocation_share(s, 81920 * MiB) == pytest.approx(0.1)


@pytest.mark.parametrize("version, entries", [
    ("2.10", ["{w}", "", "{s}", ""]),     # init containers first, one entry each
    ("2.8", ["{s}", ""]),                 # containers only
])
def test_annotation_encoding_by_hami_version(tmp_path, version, entries):
    sim, res = run(tmp_path, scenario(f'hami_version: "{version}"'))
    pod = next(p for p in sim.pods()["items"] if p["metadata"]["name"] == "cache")
    value = pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"]
    cache = sim.spec.pods[0]
    warm, server = cache.init_containers[0], cache.containers[0]
    w = f"{sim.gpus[warm.devices[0]].uuid},NVIDIA,4096,10:"
    s = f"{sim.gpus[server.devices[0]].uuid},NVIDIA,8192,0:"
    assert value == "".join(e.format(w=w, s=s) + ";" for e in entries)
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["warmup", "fetch"]
    assert all("terminated" in st["state"] for st in pod["status"]["initContainerStatuses"])
    # either way the grant lands on `server`, and the completed init container holds no slice
    got = {(s.pod, s.container): s for s in res.tick.slices}
    assert set(got) == {("cache", "server"), ("train", "main")}
    assert got[("cache", "server")].alloc_memory_bytes == 8192 * MiB


def test_watcher_zeroing_leaves_the_slots_at_zero_and_nvml_wins(tmp_path):
    sim, res = run(tmp_path, scenario("hami_watcher_zeroed: 1.0"))
    data = region_file(tmp_path, sim, "main")
    assert slot_field(data, "1.2", 0, "", kind="util") == 0 and slot_field(data, "1.2", 0, "", kind="monitor") == 0
    assert slot_field(data, "1.2", 0, "", kind="used") > 0          # memory accounting is not the watcher's
    s = next(s for s in res.tick.slices if s.container == "main")
    assert s.sm_util_ratio > 0.1                                     # NVML's per-process sample


def test_a_killed_writer_leaves_its_slot_odd_and_the_rest_is_read(tmp_path):
    sim, res = run(tmp_path, scenario(ctr_opts="hami_writer_killed: true"))
    data = region_file(tmp_path, sim, "server")
    assert struct.unpack_from("<i", data, LAYOUTS["1.2"].at("proc_num"))[0] == 2
    assert slot_field(data, "1.2", 1, "seqlock", kind="field") % 2 == 1
    sim.advance(T0 + 10_000)                                         # a later write leaves it odd
    data = region_file(tmp_path, sim, "server")
    assert slot_field(data, "1.2", 1, "seqlock", kind="field") % 2 == 1
    assert [e.reason for *_, e in res.region_errors] == ["seqlock_stuck"]
    s = next(s for s in res.tick.slices if s.container == "server")
    assert s.source == "hami" and s.hami_memory_used_bytes == slot_field(region_file(tmp_path, sim, "server"), "1.2", 0, "")
    assert s.process_count == 1


def test_the_unreleased_layout_is_refused_live_and_in_time_travel(tmp_path):
    scn = scenario('hami_core: "1.1-2026-03"')
    _, res = run(tmp_path, scn)
    assert {e.reason for *_, e in res.region_errors} == {"unsupported_layout"}
    live = {(s.container, s.gpu_uuid): s for s in res.tick.slices}
    assert all(s.source == "annotation" and s.hami_memory_used_bytes is None for s in live.values())
    (_, _, table), = list(generate(scn, T0, T0 + 1))
    rows = {(r["container"], r["gpu_uuid"]): r for r in table.to_pylist()}
    assert set(rows) == set(live)
    for k, r in rows.items():
        assert r["source"] == "annotation" and r["hami_memory_used_bytes"] is None and r["sm_util_ratio"] is None
        assert r["alloc_memory_bytes"] == live[k].alloc_memory_bytes
        assert r["sm_limit_ratio"] == pytest.approx(live[k].sm_limit_ratio) if live[k].sm_limit_ratio else r["sm_limit_ratio"] is None


@pytest.mark.parametrize("opts, words", [
    ('hami_core: "1.3"', "unknown HAMi-core version"),
    ("hami_version: 2.8", 'hami_version: expected a string, got float 2.8 \\(quote it: "2.8"\\)'),
    ('hami_version: "2.7"', "unknown HAMi version"),
    ("hami_watcher_zeroed: 1.5", r"hami_watcher_zeroed: 1.5 must be <= 1"),
    ('hami_layout: v0\n    hami_core: "1.2"', "not both"),
])
def test_bad_options_name_the_key(opts, words):
    with pytest.raises(ScenarioError, match=words):
        scenario(opts)
