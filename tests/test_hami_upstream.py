"""The exporter against what HAMi-core and HAMi really write, fixtures from their sources.

Region bytes come from testkit/hami_bytes.py, which lays out HAMi-core's own struct
definitions (src/multiprocess/multiprocess_memory_limit.h) per commit. Behaviours cited:

- HAMi-core 8f3a89c67b037d8fdfe6c4cd4d8c4f0cd6504811, src/multiprocess/multiprocess_memory_limit.c:
  the file is created by `lseek(fd, SHARED_REGION_SIZE_MAGIC)` + `write(fd, "\\0", 1)` (sizeof + 1);
  `do_init_device_sm_limits` stores 100 when CUDA_DEVICE_SM_LIMIT is 0 or unset;
  `add_gpu_device_memory_usage` bumps the slot's seqlock to odd, updates `total` then the kind,
  bumps it to even; `get_gpu_memory_usage` reads seq, data, seq and retries on a mismatch;
  `init_gpu_device_utilization` zeroes every live slot's sm_util and monitorused each cycle.
- HAMi-core same commit, src/multiprocess/multiprocess_utilization_watcher.c: the watcher
  throttles only when 0 < sm_limit < 100.
- HAMi-core e200da2c2ace17207accf106030715c787ce8e54 (the 2,008,984-byte 1.1 layout) and
  b69b1eab768690b1e423e69dad26257fcc7a780f (1.2 restores the older offsets).
- HAMi 4707fb02c91c545bc7343ce26dba4c32919f9a3e (v2.10.0), cmd/vGPUmonitor/metrics.go: a
  device whose UUID is not yet written is skipped, not the container.
- HAMi pkg/device/devices.go: EncodePodSingleDevice writes each container's
  `uuid,type,mem,cores:` entries then `;`; Resourcereqs indexes init containers first since
  v2.9.0 (3a006c6ae2f077a2683df7805c43656c07f6dc15), containers only at v2.8.3
  (8f039ad22bfc14970e2ea557f24c411c34203079); pkg/device/nvidia/device.go at v2.8.3 appends
  `[tidx-idx]` to the UUID in MIG mode (AddResourceUsage).
"""
from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pytest

from slicemeter.exporter.sources.hami import LAYOUT_V0, LAYOUT_V1, Region, RegionError, parse_region, parse_region_bytes
from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import AnnotationError, Grant, PodCache, assign_grants, parse_vgpu_allocated
from slicemeter.exporter.assemble.shares import allocation_share
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.common import GiB, MiB
from slicemeter.testkit.hami_bytes import LAYOUTS, Proc, build_region, file_size
from slicemeter.simulator.nvml import FakeNvml, GpuNow, ProcNow

GPU0 = "GPU-6c0e4f8a-1d2b-4a3c-9e8f-0123456789ab"
GPU1 = "GPU-6c0e4f8a-1d2b-4a3c-9e8f-ba9876543210"
DEV_MEM = {GPU0: 80 * GiB, GPU1: 80 * GiB}
NOW = 1_795_000_000
UID = "0f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"


def region(key="1.2", devices=((GPU0, 8 * GiB, 100), (GPU1, 4 * GiB, 30)), procs=None, **kw):
    if procs is None:
        procs = [Proc(11, 4011, [(300 * MiB, 0, GiB), (0, 0, 0)], [40, 0], seq=4),
                 Proc(12, 4012, [(0, 0, 0), (300 * MiB, 0, 2 * GiB)], [0, 25], seq=2)]
    return build_region(key, devices=list(devices), procs=procs, last_kernel_time=NOW - 3,
                        size=kw.pop("size", file_size(key)), **kw)


# ------------------------------------------------------------------ layouts and sizes

@pytest.mark.parametrize("exporter_layout, key", [(LAYOUT_V0, "v0"), (LAYOUT_V1, "1.1"), (LAYOUT_V1, "1.2")])
def test_exporter_offsets_are_hami_cores_structs(exporter_layout, key):
    up = LAYOUTS[key]
    lay = exporter_layout
    assert lay.size == up.region.size and lay.slot_size == up.slot.size
    assert (lay.num_off, lay.uuids_off, lay.limit_off, lay.sm_limit_off, lay.procs_off, lay.tail_off) == tuple(
        up.at(f) for f in ("device_num", "uuids", "limit", "sm_limit", "procs", "proc_num"))
    slot = up.slot.offsets
    assert (lay.monitor_off, lay.util_off, lay.status_off, lay.seq_off) == (
        slot["monitorused"], slot["device_util"], slot["status"], slot.get("seqlock"))
    assert (8 * lay.used_stride, 8 * lay.util_stride) == (up.mem.size, up.util.size)


@pytest.mark.parametrize("key", ["v0", "1.1", "1.2"])
def test_reads_the_file_hami_core_creates(key):
    r = parse_region_bytes(region(key), DEV_MEM, now_s=NOW)
    assert isinstance(r, Region), r
    assert r.file_size == LAYOUTS[key].region.size + 1
    assert (r.major, r.minor) == (LAYOUTS[key].version or (None, None))
    d0, d1 = r.devices
    # sm_limit 100 is what HAMi-core stores without CUDA_DEVICE_SM_LIMIT: no core limit
    assert (d0.sm_limit_pct, d1.sm_limit_pct) == (None, 30)
    assert (d0.used_bytes, d1.used_bytes) == (300 * MiB + GiB, 300 * MiB + 2 * GiB)


@pytest.mark.parametrize("sm_limit", [0, 100, 150])
def test_sm_limit_0_or_100_or_more_is_no_core_limit(sm_limit):
    r = parse_region_bytes(region(devices=[(GPU0, 8 * GiB, sm_limit)], procs=[]), DEV_MEM, now_s=NOW)
    assert isinstance(r, Region) and r.devices[0].sm_limit_pct is None


def test_the_unreleased_1_1_layout_is_refused_by_name():
    buf = region("1.1-moved")
    assert len(buf) == 2_008_985
    r = parse_region_bytes(buf, DEV_MEM, now_s=NOW)
    assert isinstance(r, RegionError) and r.reason == "unsupported_layout", r
    assert "2008984" in r.detail


@pytest.mark.parametrize("key, mutate, reason", [
    ("1.2", lambda b: struct.pack_into("<II", b, 4, 1, 3), "bad_version"),       # a minor not known yet
    ("1.2", lambda b: struct.pack_into("<II", b, 4, 2, 0), "bad_version"),
    ("1.2", lambda b: b.extend(b"\0"), "bad_size"),                              # sizeof + 2
    ("v0", lambda b: b.extend(b"\0" * 64), "bad_size"),
])
def test_only_known_versions_and_sizes(key, mutate, reason):
    buf = region(key)
    mutate(buf)
    r = parse_region_bytes(buf, DEV_MEM, now_s=NOW)
    assert isinstance(r, RegionError) and r.reason == reason, r


# ------------------------------------------------------------------ seqlock

def test_seqlock_is_read_before_the_data():
    """A write that completes while the reader copies the slot: the copy holds a half-done
    update (total bumped, data_size not yet) and, at the slot's end, the final even sequence.
    Only a sequence read before the copy shows the write happened."""
    lay = LAYOUTS["1.2"]
    buf = region()
    seq_at = lay.slot_at(0, "seqlock")
    data_at = lay.slot_at(0, "used") + lay.mem.offsets["data_size"]

    def read_at(off, n):
        out = bytearray(buf[off : off + n])
        copies_the_slot = off <= data_at and seq_at + 8 <= off + n
        if copies_the_slot and struct.unpack_from("<Q", buf, seq_at)[0] == 4:
            struct.pack_into("<Q", out, data_at - off, 0)          # torn: the buffer not yet added
            struct.pack_into("<Q", out, seq_at - off, 6)           # ... but the copy ends after the write
            struct.pack_into("<Q", buf, data_at, 5 * GiB)          # the write as it completed
            struct.pack_into("<Q", buf, seq_at, 6)
        return bytes(out)

    r = parse_region(read_at, len(buf), DEV_MEM, now_s=NOW)
    assert isinstance(r, Region), r
    assert r.devices[0].buffer_bytes == 5 * GiB


def test_a_slot_stuck_odd_costs_that_slot_with_bounded_retries():
    """A writer killed between its two seqlock increments leaves the slot odd for good."""
    lay = LAYOUTS["1.2"]
    buf = region()
    struct.pack_into("<Q", buf, lay.slot_at(0, "seqlock"), 5)
    reads = []

    def read_at(off, n):
        reads.append(n)
        return bytes(buf[off : off + n])

    r = parse_region(read_at, len(buf), DEV_MEM, now_s=NOW)
    assert isinstance(r, Region), r
    assert r.stuck_slots == [0] and [p.pid for p in r.procs] == [12]
    assert r.devices[0].used_bytes == 0 and r.devices[1].used_bytes == 300 * MiB + 2 * GiB
    assert len(reads) < 40 and sum(reads) < 30 * lay.slot.size


def test_an_unset_device_uuid_costs_that_device():
    lay = LAYOUTS["1.2"]
    buf = region()
    buf[lay.at("uuids") : lay.at("uuids") + 96] = bytes(96)
    r = parse_region_bytes(buf, DEV_MEM, now_s=NOW)
    assert isinstance(r, Region), r
    assert [(i, e.reason) for i, e in r.device_errors] == [(0, "uuid_unset")]
    assert [(d.index, d.uuid, d.used_bytes) for d in r.devices] == [(1, GPU1, 300 * MiB + 2 * GiB)]


# ------------------------------------------------------------------ through the Tick builder

class _Node:
    """NodeSource for the simulator's fake NVML: two 80 GiB GPUs, the given processes."""

    def __init__(self, procs: dict[int, list[ProcNow]]):
        self.ts_ms = NOW * 1000
        self.procs = procs

    def gpu_count(self):
        return 2

    def gpu_now(self, i):
        return GpuNow(uuid=(GPU0, GPU1)[i], name="NVIDIA A100-SXM4-80GB", memory_total=80 * GiB,
                      memory_used=sum(p.used_bytes for p in self.procs.get(i, [])), sm_pct=50, mem_util_pct=10,
                      power_mw=200_000, energy_mj=1)

    def procs_now(self, i):
        return self.procs.get(i, [])


def _pod(annotation: str | None, containers=("main",), init=(), init_done=()) -> dict:
    pod = {"metadata": {"uid": UID, "name": "p", "namespace": "team",
                        "annotations": {"hami.io/vgpu-devices-allocated": annotation} if annotation else {}},
           "spec": {"containers": [{"name": c} for c in containers]},
           "status": {"phase": "Running"}}
    if init:
        pod["spec"]["initContainers"] = [{"name": c} for c in init]
        pod["status"]["initContainerStatuses"] = [
            {"name": c, "state": {"terminated": {"exitCode": 0}} if c in init_done else {"running": {}}} for c in init]
    return pod


def _builder(tmp_path, pods: list[dict], regions: dict[str, bytes | list[bytes]], procs=None) -> TickBuilder:
    for container, data in regions.items():
        d = tmp_path / "hami" / "containers" / f"{UID}_{container}"
        d.mkdir(parents=True)
        for k, b in enumerate(data if isinstance(data, list) else [data]):
            (d / f"{k:02d}.cache").write_bytes(bytes(b))
    cache = PodCache(lambda: {"kind": "PodList", "items": pods})
    cache.refresh()
    nvml = FakeNvml(_Node(procs if procs is not None else {0: [ProcNow(4011, 300 * MiB + GiB, 40, 5)]}))
    nvml.nvmlInit()
    return TickBuilder("node-a", "https://c:6443", NvmlReader(nvml, initialised=True), str(tmp_path / "hami"), cache,
                       proc_root=None)


def _slices(res):
    return {(s.container, s.gpu_uuid): s for s in res.tick.slices}


def test_a_memory_only_slice_is_billed_by_its_memory_share(tmp_path):
    """gpumem without gpucores: HAMi grants cores 0, injects CUDA_DEVICE_SM_LIMIT=0, and
    HAMi-core stores sm_limit 100. The slice holds 8 GiB of 80: one tenth of the GPU."""
    one = region(devices=[(GPU0, 8 * GiB, 100)], procs=[Proc(11, 4011, [(300 * MiB, 0, GiB)], [40], seq=2)])
    res = _builder(tmp_path, [_pod(f"{GPU0},NVIDIA,8192,0:;")], {"main": one}).build(NOW * 1000)
    s = _slices(res)[("main", GPU0)]
    assert s.source == "hami" and s.sm_limit_ratio is None and s.alloc_cores_ratio == 0.0
    assert allocation_share(s, 80 * GiB) == pytest.approx(0.1)


def test_a_memory_only_grant_without_a_region_yet_is_billed_the_same(tmp_path):
    res = _builder(tmp_path, [_pod(f"{GPU0},NVIDIA,8192,0:;")], {}).build(NOW * 1000)
    s = _slices(res)[("main", GPU0)]
    assert s.source == "annotation" and s.sm_limit_ratio is None and s.alloc_cores_ratio == 0.0
    assert allocation_share(s, 80 * GiB) == pytest.approx(0.1)


def test_without_a_grant_sm_limit_100_is_not_a_whole_gpu(tmp_path):
    one = region(devices=[(GPU0, 8 * GiB, 100)], procs=[Proc(11, 4011, [(300 * MiB, 0, GiB)], [40], seq=2)])
    res = _builder(tmp_path, [_pod(None)], {"main": one}).build(NOW * 1000)
    s = _slices(res)[("main", GPU0)]
    assert s.alloc_cores_ratio is None and allocation_share(s, 80 * GiB) == pytest.approx(0.1)


def test_the_watchers_zeroed_sm_util_gives_way_to_nvmls_sample(tmp_path):
    """Between init_gpu_device_utilization and the next NVML sample every slot reads 0 %."""
    zeroed = region(devices=[(GPU0, 8 * GiB, 30)], procs=[Proc(11, 4011, [(300 * MiB, 0, GiB)], [0], seq=2)])
    res = _builder(tmp_path, [_pod(f"{GPU0},NVIDIA,8192,30:;")], {"main": zeroed}).build(NOW * 1000)
    assert _slices(res)[("main", GPU0)].sm_util_ratio == pytest.approx(0.40)


def test_the_unreleased_layout_is_counted_and_the_slice_unknown(tmp_path):
    res = _builder(tmp_path, [_pod(f"{GPU0},NVIDIA,8192,30:;")], {"main": region("1.1-moved")}).build(NOW * 1000)
    assert [e.reason for *_, e in res.region_errors] == ["unsupported_layout"]
    assert res.hami_ok == {(UID, "main"): False}
    s = _slices(res)[("main", GPU0)]
    assert s.source == "annotation" and s.hami_memory_used_bytes is None


def test_a_stuck_slot_and_an_unset_device_are_counted_not_fatal(tmp_path):
    lay = LAYOUTS["1.2"]
    buf = region()
    struct.pack_into("<Q", buf, lay.slot_at(1, "seqlock"), 3)                 # slot 1 (GPU1's process) stuck
    ann = f"{GPU0},NVIDIA,8192,0:{GPU1},NVIDIA,4096,30:;"
    res = _builder(tmp_path, [_pod(ann)], {"main": buf}).build(NOW * 1000)
    assert [e.reason for *_, e in res.region_errors] == ["seqlock_stuck"] and res.hami_ok[(UID, "main")]
    got = _slices(res)
    assert got[("main", GPU0)].hami_memory_used_bytes == 300 * MiB + GiB
    assert got[("main", GPU1)].hami_memory_used_bytes == 0   # the stuck slot's process is not counted


def test_a_second_cache_file_makes_the_container_unknown_not_idle(tmp_path):
    res = _builder(tmp_path, [_pod(f"{GPU0},NVIDIA,8192,30:;")], {"main": [region(), region()]}).build(NOW * 1000)
    assert [e.reason for *_, e in res.region_errors] == ["ambiguous"]
    assert res.hami_ok == {(UID, "main"): False}
    s = _slices(res)[("main", GPU0)]
    assert s.hami_memory_used_bytes is None and s.sm_util_ratio is None


# ------------------------------------------------------------------ annotations

def _encode(entries: list[list[tuple[str, int, int]]]) -> str:
    """HAMi's EncodePodSingleDevice: `uuid,NVIDIA,mem,cores:` per device, `;` after each container."""
    return "".join("".join(f"{u},NVIDIA,{m},{c}:" for u, m, c in devs) + ";" for devs in entries)


def test_v2_9_plus_indexes_init_containers_first():
    # initContainers [warmup (GPU), fetch (none)], containers [main (GPU), proxy (none)]
    value = _encode([[(GPU0, 2048, 10)], [], [(GPU1, 8192, 30)], []])
    got = assign_grants(parse_vgpu_allocated(value), ["warmup", "fetch"], ["main", "proxy"])
    assert got == {"warmup": [Grant(GPU0, "NVIDIA", 2048, 10)], "main": [Grant(GPU1, "NVIDIA", 8192, 30)]}


def test_v2_8_indexes_containers_only():
    value = _encode([[(GPU1, 8192, 30)], []])
    got = assign_grants(parse_vgpu_allocated(value), ["warmup", "fetch"], ["main", "proxy"])
    assert got == {"main": [Grant(GPU1, "NVIDIA", 8192, 30)]}


def test_an_entry_count_that_fits_neither_encoding_is_refused():
    with pytest.raises(AnnotationError, match="3 entries for 2 init containers and 2 containers"):
        assign_grants(parse_vgpu_allocated(_encode([[], [], [(GPU1, 1, 1)]])), ["a", "b"], ["main", "proxy"])


def test_v2_8_mig_uuid_suffix():
    value = f"{GPU0}[1-0],NVIDIA,10240,50:;"
    assert parse_vgpu_allocated(value) == [[Grant(GPU0, "NVIDIA", 10240, 50, (1, 0))]]


def test_grants_land_on_the_right_container_through_the_builder(tmp_path):
    value = _encode([[(GPU0, 2048, 10)], [(GPU1, 8192, 30)], []])
    pod = _pod(value, containers=("main", "proxy"), init=("warmup",), init_done=("warmup",))
    main = region(devices=[(GPU1, 8 * GiB, 30)], procs=[Proc(12, 4012, [(300 * MiB, 0, GiB)], [20], seq=2)])
    res = _builder(tmp_path, [pod], {"main": main, "warmup": region(devices=[(GPU0, 2 * GiB, 10)], procs=[])},
                   procs={1: [ProcNow(4012, 300 * MiB + GiB, 20, 5)]}).build(NOW * 1000)
    got = _slices(res)
    assert set(got) == {("main", GPU1)}          # the completed init container holds nothing
    s = got[("main", GPU1)]
    assert (s.alloc_memory_bytes, s.alloc_cores_ratio, s.source) == (8192 * MiB, 0.30, "hami")


def test_a_running_init_container_is_billed_its_grant(tmp_path):
    value = _encode([[(GPU0, 2048, 10)], [(GPU1, 8192, 30)]])
    pod = _pod(value, init=("warmup",))
    res = _builder(tmp_path, [pod], {}).build(NOW * 1000)
    got = _slices(res)
    assert got[("warmup", GPU0)].alloc_memory_bytes == 2048 * MiB and got[("main", GPU1)].alloc_cores_ratio == 0.30


# ------------------------------------------------------------------ pod lists

@pytest.mark.parametrize("body", [
    {}, {"items": None}, [],
    {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "Unauthorized", "code": 401},
])
def test_a_body_that_is_not_a_podlist_keeps_the_last_good_list(body):
    bodies = [{"kind": "PodList", "items": [_pod(f"{GPU0},NVIDIA,8192,30:;")]}, body]
    cache = PodCache(lambda: bodies.pop(0))
    assert cache.refresh() and set(cache.get().pods) == {UID}
    assert not cache.refresh()
    assert set(cache.get().pods) == {UID} and cache.errors_total == 1


def test_one_bad_pod_costs_that_pod():
    good = _pod(f"{GPU0},NVIDIA,8192,30:;")
    bad = json.loads(json.dumps(good))
    bad["metadata"]["uid"] = "1" * 8 + "-1111-4111-8111-" + "1" * 12
    bad["spec"]["containers"] = [{"image": "no-name"}]
    cache = PodCache(lambda: {"kind": "PodList", "items": [bad, good]})
    assert cache.refresh()
    assert set(cache.get().pods) == {UID} and cache.errors_total == 1


# ------------------------------------------------------------------ the store

def test_ingest_never_reads_sm_limit_100_as_a_core_grant(tmp_path):
    """Ticks that carry sm_limit 1.0 and no core grant (memory-only slices metered by an
    older exporter): the rollup bills the memory share, not the whole GPU."""
    from slicemeter import store
    from slicemeter.ingest.strings import StringIds
    from slicemeter.ingest.writer import Batch, write_batch
    from slicemeter.testkit.synth_ticks import SynthNode, node_tables

    gpus, slices = node_tables(SynthNode("gpu-node-0", "https://acme:6443", gpus=1, slices_per_gpu=2),
                               1_800_057_600_000 + np.arange(0, 3_600_000, 30_000), 30_000, seed=1)
    n = slices.num_rows
    slices = slices.set_column(slices.schema.get_field_index("sm_limit_ratio"), "sm_limit_ratio",
                               pa.array(np.full(n, 1.0, np.float32)))
    slices = slices.set_column(slices.schema.get_field_index("alloc_cores_ratio"), "alloc_cores_ratio",
                               pa.nulls(n, pa.float32()))
    con = store.connect(tmp_path / "s.duckdb")
    b = Batch(next_offsets={("t", 0): 0})
    b.gpus.append(gpus)
    b.slices.append(slices)
    b.samples += gpus.num_rows + n
    write_batch(con, b, StringIds(con))
    rows = con.execute("SELECT alloc_cores_share_s, alloc_mem_share_s, alloc_dominant_share_s, metered_s, whole_gpu "
                       "FROM slice_hour").fetchall()
    assert rows
    for cores, mem, dominant, metered, whole in rows:
        assert whole or (cores == 0 and dominant == pytest.approx(mem) and dominant < metered)


def test_a_pod_name_that_cannot_be_encoded_costs_that_pod():
    """JSON allows a lone surrogate ("\\ud800"); in a Tick it would fail every slice of the node."""
    good = _pod(f"{GPU0},NVIDIA,8192,30:;")
    bad = json.loads(json.dumps(good).replace('"name": "p"', '"name": "p\\ud800"'))
    bad["metadata"]["uid"] = "2" * 8 + "-2222-4222-8222-" + "2" * 12
    cache = PodCache(lambda: json.loads(json.dumps({"kind": "PodList", "items": [bad, good]})))
    assert cache.refresh()
    assert set(cache.get().pods) == {UID} and cache.errors_total == 1


def test_a_second_cache_file_shows_as_region_ok_0_on_metrics(tmp_path):
    from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats

    res = _builder(tmp_path, [_pod(f"{GPU0},NVIDIA,8192,30:;")], {"main": [region(), region()]}).build(NOW * 1000)
    stats = ExporterStats(tenant="acme")
    stats.record(res)
    samples = {(s.name, s.labels.get("container"), s.labels.get("reason")): s.value
               for fam in ExporterCollector(stats).collect() for s in fam.samples}
    assert samples[("slicemeter_hami_region_ok", "main", None)] == 0
    assert samples[("slicemeter_hami_region_errors_total", None, "ambiguous")] == 1
