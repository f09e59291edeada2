"""HAMi's dynamic MIG allocations (`hami.io/vgpu-mig-allocations`) as a grant source beside
NVML's MIG devices: read, metered, flagged where the two disagree, billed.

The annotation's shape and HAMi's own checks are from HAMi 0ce9ff83 (2026-08-10):
pkg/device/nvidia/mig_allocations.go (MigAllocation, DecodeMigAllocations), the entries of
pkg/scheduler/mig_allocation_test.go and pkg/device/pod_test.go, with their placeholder
UUIDs (`GPU-a`, `MIG-a`) replaced by UUIDs of NVIDIA's format (docs/upstream.md).
"""
from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow.parquet as pq
import pytest

from slicemeter.exporter.sources.hami_mig import MigAllocation, MigAllocationError, by_container, parse_mig_allocations
from slicemeter.simulator.nvml import MigNow, ProcNow
from slicemeter.testkit.static_node import A100_TOTAL, GiB, StaticNode, builder, gpu, pod, slice_metrics

GPU_A = "GPU-3f0c1a2b-4d5e-6f70-8192-a3b4c5d6e7f8"
GPU_B = "GPU-9e8d7c6b-5a49-3827-1605-f4e3d2c1b0a9"
MIG_A = "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"     # 1g.10gb, GPU instance 13
MIG_3G = "MIG-6f0e1d2c-3b4a-5968-7788-99aabbccddee"    # 3g.40gb, GPU instance 2
UID = "7e6d5c4b-3a29-4817-9605-a4b3c2d1e0f9"

# pkg/scheduler/mig_allocation_test.go: a realized allocation (runtime identity filled in) ...
REALIZED = (f'[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{GPU_A}","profile":"1g.10gb",'
            f'"placement":{{"start":6,"size":1}},"migUUID":"{MIG_A}","gpuInstanceID":13,"computeInstanceID":0}}]')
# ... and two reservations of one container on one GPU the device plugin has not realized yet
RESERVED = f'''[
    {{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{GPU_A}","profile":"1g.10gb","placement":{{"start":6,"size":1}}}},
    {{"containerIndex":0,"deviceIndex":1,"gpuUUID":"{GPU_A}","profile":"1g.10gb","placement":{{"start":5,"size":1}}}}
]'''


def test_the_annotation_reads_as_hami_writes_it():
    (a,) = parse_mig_allocations(REALIZED)
    assert a == MigAllocation(0, 0, GPU_A, "1g.10gb", 6, 1, MIG_A, 13, 0) and a.compute_slices == 1
    assert [(x.device_index, x.placement_start, x.mig_uuid) for x in parse_mig_allocations(RESERVED)] == \
        [(0, 6, None), (1, 5, None)]
    assert parse_mig_allocations("") == []
    assert MigAllocation(0, 0, GPU_A, "1c.3g.40gb", 0, 4).compute_slices == 3


@pytest.mark.parametrize("value, reason", [
    ('[{"profile":"1g.5gb"}]', "incomplete"),                                            # pkg/device/pod_test.go
    (f'[{{"containerIndex":-1,"gpuUUID":"{GPU_A}","profile":"1g.10gb","placement":{{"size":1}}}}]', "incomplete"),
    (f'[{{"gpuUUID":"{GPU_A}","profile":"1g.10gb","placement":{{"start":6,"size":0}}}}]', "incomplete"),
    (f'[{{"gpuUUID":"{GPU_A}","profile":"1g.10gb","placement":{{"size":1}},"migUUID":"{MIG_A}"}}]',
     "partial runtime identity"),
    (RESERVED.replace('"deviceIndex":1', '"deviceIndex":0'), "duplicate MIG allocation for container 0 device 0"),
    ('[{"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"size":1}}]', "not a GPU UUID"),
    (f'[{{"gpuUUID":"{GPU_A}","profile":"big","placement":{{"size":1}}}}]', "not a MIG profile"),
    ('{"not": "an array"}', "not a JSON array"),
    ("[", "not JSON"),
])
def test_what_hami_refuses_is_refused(value, reason):
    with pytest.raises(MigAllocationError, match=reason):
        parse_mig_allocations(value)


def test_container_index_counts_init_containers_first():
    got = by_container(parse_mig_allocations(REALIZED.replace('"containerIndex":0', '"containerIndex":1')),
                       ["warmup"], ["main"])
    assert list(got) == ["main"]
    with pytest.raises(MigAllocationError, match="the pod has 1"):
        by_container(parse_mig_allocations(REALIZED.replace('"containerIndex":0', '"containerIndex":3')), [], ["main"])


def mig_node() -> StaticNode:
    """GPU A in MIG mode (7 slices): a 3g.40gb and a 1g.10gb instance. No host /proc is given:
    NVML's processes are nobody's, the annotation alone names the instances' containers."""
    return StaticNode(gpus=[gpu(GPU_A), gpu(GPU_B)], mig={0: (7, [
        MigNow(index=0, uuid=MIG_3G, gpu_instance_id=2, compute_instance_id=0, slices=3, memory_size_mb=40192,
               memory_used=12 * GiB, procs=(ProcNow(pid=201, used_bytes=12 * GiB, sm_pct=0, mem_util_pct=0),)),
        MigNow(index=4, uuid=MIG_A, gpu_instance_id=13, compute_instance_id=0, slices=1, memory_size_mb=9728,
               memory_used=3 * GiB, procs=(ProcNow(pid=211, used_bytes=3 * GiB, sm_pct=0, mem_util_pct=0),))])})


def mig_pod(annotation: str) -> dict:
    p = pod(UID, "infer-0", "ml", ["main"])
    p["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"] = annotation
    return p


def build(tmp_path, annotation: str):
    return builder(mig_node(), tmp_path / "hami", [mig_pod(annotation)]).build(1_795_000_000_000)


def flags(res) -> dict[str, float]:
    return {p: v for (family, p), v in slice_metrics(res).items() if family == "slicemeter_slice_mig_disagreement"}


def test_a_realized_allocation_is_metered_as_its_mig_device(tmp_path):
    res = build(tmp_path, REALIZED)
    (s,) = res.tick.slices
    assert (s.pod, s.container, s.gpu_uuid, s.source) == ("infer-0", "main", GPU_A, "mig")
    assert s.alloc_cores_ratio == pytest.approx(1 / 7) and s.alloc_memory_bytes == int(1 / 7 * A100_TOTAL)
    assert s.nvml_memory_used_bytes == 3 * GiB and s.process_count == 1    # the instance's own figures
    assert res.mig_disagreement == {} and flags(res) == {"infer-0": 0.0}
    assert res.mig[(UID, "main", GPU_A)].uuid == MIG_A


def test_reservations_not_realized_yet_are_metered_by_their_profiles(tmp_path):
    (s,) = build(tmp_path, RESERVED).tick.slices
    assert s.alloc_cores_ratio == pytest.approx(2 / 7) and s.nvml_memory_used_bytes is None


@pytest.mark.parametrize("change, what", [
    ({"migUUID": MIG_3G}, "profile 1g.10gb, NVML 3 slices"),                     # another instance
    ({"gpuInstanceID": 9}, "GPU instance 9, NVML 13"),
    ({"migUUID": "MIG-11111111-2222-4333-8444-555555555555"}, "not among NVML's MIG devices"),
    ({"gpuUUID": GPU_B, "migUUID": MIG_A}, "GPU not in MIG mode"),
])
def test_a_disagreement_flags_the_slice_and_keeps_it(tmp_path, change, what):
    entry = json.loads(REALIZED)[0] | change
    res = build(tmp_path, json.dumps([entry]))
    (s,) = res.tick.slices
    assert s.source == "mig" and s.alloc_cores_ratio == pytest.approx(1 / 7)   # still metered, by the allocation
    (why,) = res.mig_disagreement.values()
    assert what in why and flags(res) == {"infer-0": 1.0}


def test_a_mig_allocation_is_billed(tmp_path):
    """An hour of the realized allocation's Ticks through ingest's writer and `slicemeter
    export`: a seventh of a $2.40 A100-hour, $0.34; the GPU's idle is the rest."""
    from slicemeter.cli import main
    from slicemeter.store import connect
    from slicemeter.testkit.cb_rows import ACME, add_tenants
    from slicemeter.testkit.ingest_helpers import an_hour_of, store_ticks

    ticks = an_hour_of(build(tmp_path, REALIZED).tick, ACME)
    hour_ms = ticks[0].ts_ms
    db = tmp_path / "mig.duckdb"
    con = connect(db)
    add_tenants(con)
    store_ticks(con, ticks)
    con.close()
    month = dt.datetime.fromtimestamp(hour_ms / 1000, dt.timezone.utc).strftime("%Y-%m")
    assert main(["export", "--db", str(db), "--month", month, "--out", str(tmp_path / "out")]) == 0
    detail = pq.read_table(tmp_path / "out" / f"detail-{month}.parquet").to_pylist()
    (line,) = [r for r in detail if r["kind"] == "usage"]
    assert (line["pod"], line["gpu_uuid"], line["gpu_hours_allocated"], line["cost"]) == \
        ("infer-0", GPU_A, Decimal("0.1429"), Decimal("0.34"))
    assert sum(r["cost"] for r in detail if r["gpu_uuid"] == GPU_A) == Decimal("2.40")
