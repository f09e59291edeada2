"""NVML as nvidia-ml-py presents it: errors by code, permanent NOT_SUPPORTED, lost GPUs, MIG.

Fixtures are written from nvidia-ml-py 13.615.71 (PyPI; its pynvml.py): the NVML_ERROR_*
codes, `_extractNVMLErrorsAsClasses` generating one NVMLError subclass per code
(NVML_ERROR_FUNCTION_NOT_FOUND -> NVMLError_FunctionNotFound, GPU_NOT_FOUND ->
NVMLError_GpuNotFound, LIBRARY_NOT_FOUND -> NVMLError_LibraryNotFound: all end in
"NotFound"), NVMLError.value carrying the code, nvmlDeviceGetMigMode returning
[current, pending], nvmlDeviceGetMaxMigDeviceCount / nvmlDeviceGetMigDeviceHandleByIndex,
c_nvmlDeviceAttributes (gpuInstanceSliceCount, memorySizeMB) and
nvmlDeviceGetGpuInstanceId / nvmlDeviceGetComputeInstanceId. The simulator's fake NVML
raises pynvml's own classes.
"""
from __future__ import annotations

import pytest

from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats
from slicemeter.exporter.sources.nvml import NvmlReader, nvml_code
from slicemeter.simulator.nvml import MigNow, ProcNow, pynvml
from slicemeter.testkit.static_node import A100, A100_TOTAL, GiB, StaticNode, builder, gpu, pod, write_cgroup

UUIDS = ["GPU-3f0c1a2b-4d5e-6f70-8192-a3b4c5d6e7f8", "GPU-9e8d7c6b-5a49-3827-1605-f4e3d2c1b0a9"]


def two_gpus(**kw) -> StaticNode:
    return StaticNode(gpus=[gpu(u) for u in UUIDS],
                      procs={0: [ProcNow(pid=101, used_bytes=GiB, sm_pct=30, mem_util_pct=5)]}, **kw)


def test_pynvml_names_several_codes_not_found_and_the_code_tells_them_apart():
    for code, name in ((pynvml.NVML_ERROR_NOT_FOUND, "NVMLError_NotFound"),
                       (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, "NVMLError_FunctionNotFound"),
                       (pynvml.NVML_ERROR_GPU_NOT_FOUND, "NVMLError_GpuNotFound"),
                       (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVMLError_LibraryNotFound")):
        exc = pynvml.NVMLError(code)
        assert type(exc).__name__ == name and nvml_code(exc) == code
    assert nvml_code(ValueError("x")) is None


@pytest.mark.parametrize("code", [pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_GPU_NOT_FOUND,
                                  pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_UNKNOWN])
def test_only_nvml_error_not_found_means_no_samples(code):
    node = two_gpus()
    nv = node.fake_nvml()
    nv.fail("nvmlDeviceGetProcessUtilization", code, gpu=0)
    snap = NvmlReader(nv, initialised=True).read()
    assert snap.gpus[0].process_sm_util is None       # unknown, not "no process ran a kernel"
    assert snap.errors == 1
    assert snap.gpus[1].process_sm_util == {}          # GPU 1: real NOT_FOUND (no processes), no error


def test_not_supported_is_counted_once_per_gpu_and_call():
    node = two_gpus()
    nv = node.fake_nvml()
    nv.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=1)
    nv.fail("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
    reader = NvmlReader(nv, initialised=True)
    first, second, third = reader.read(), reader.read(), reader.read()
    assert first.errors == 3                            # power on GPU 1, energy on both
    assert second.errors == third.errors == 0
    assert [g.power_w for g in third.gpus] == [250.0, None]
    assert all(g.energy_j is None for g in third.gpus)
    assert reader.unsupported == {(1, "nvmlDeviceGetPowerUsage"), (0, "nvmlDeviceGetTotalEnergyConsumption"),
                                  (1, "nvmlDeviceGetTotalEnergyConsumption")}


def test_unsupported_calls_stay_visible_on_metrics(tmp_path):
    node = two_gpus()
    b = builder(node, tmp_path / "hami", [])
    b.nvml.nvml.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NOT_SUPPORTED, gpu=1)
    stats = ExporterStats(tenant="acme")
    for _ in range(3):
        stats.record(b.build(node.ts_ms))
    text = ExporterCollector(stats).exposition().decode()
    assert 'slicemeter_source_errors_total{source="nvml"} 1\n' in text
    assert [line for line in text.splitlines() if line.startswith("slicemeter_nvml_unsupported_calls{")] == [
        'slicemeter_nvml_unsupported_calls{call="nvmlDeviceGetPowerUsage",gpu_index="1"} 1']


def test_other_errors_count_every_time_and_cost_only_their_value():
    node = two_gpus()
    nv = node.fake_nvml()
    nv.fail("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_TIMEOUT, gpu=0)
    reader = NvmlReader(nv, initialised=True)
    for _ in range(2):
        snap = reader.read()
        assert snap.errors == 1 and snap.gpus[0].util_gpu_pct is None and snap.gpus[0].memory_total == A100_TOTAL


def test_a_lost_gpu_costs_that_gpu_only():
    node = two_gpus()
    nv = node.fake_nvml()
    nv.fail("nvmlDeviceGetName", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=1)
    snap = NvmlReader(nv, initialised=True).read()
    assert [(g.uuid, g.lost) for g in snap.gpus] == [(UUIDS[0], False), (UUIDS[1], True)] and snap.errors == 1
    assert snap.gpus[0].util_gpu_pct == 37 and snap.gpus[0].processes == {101: GiB}
    lost = snap.gpus[1]
    assert lost.name is None and lost.memory_total is None and lost.health.temperature_c is None


def test_a_gpu_without_mig_is_no_error():
    snap = NvmlReader(two_gpus().fake_nvml(), initialised=True).read()
    assert snap.errors == 0 and all(g.mig is None for g in snap.gpus)


# --- MIG ------------------------------------------------------------------------------------

MIG_3G = "MIG-6f0e1d2c-3b4a-5968-7788-99aabbccddee"
MIG_1G = "MIG-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
TRAIN_UID = "7e6d5c4b-3a29-4817-9605-a4b3c2d1e0f9"
NB_UID = "1a2b3c4d-5e6f-4708-9a1b-2c3d4e5f6a7b"


def mig_node() -> StaticNode:
    """GPU 0 in MIG mode (7 slices): a 3g.40gb (slot 0) and a 1g.10gb (slot 4) instance, slots between empty.
    Memory sizes as NVML reports them on an A100 80GB."""
    return StaticNode(
        gpus=[gpu(u) for u in UUIDS],
        procs={1: [ProcNow(pid=300, used_bytes=2 * GiB, sm_pct=10, mem_util_pct=1)]},
        mig={0: (7, [MigNow(index=0, uuid=MIG_3G, gpu_instance_id=2, compute_instance_id=0, slices=3,
                            memory_size_mb=40192, memory_used=12 * GiB,
                            procs=(ProcNow(pid=201, used_bytes=8 * GiB, sm_pct=0, mem_util_pct=0),
                                   ProcNow(pid=202, used_bytes=3 * GiB, sm_pct=0, mem_util_pct=0))),
                     MigNow(index=4, uuid=MIG_1G, gpu_instance_id=13, compute_instance_id=0, slices=1,
                            memory_size_mb=9728, memory_used=GiB,
                            procs=(ProcNow(pid=211, used_bytes=GiB // 2, sm_pct=0, mem_util_pct=0),))])})


def test_mig_devices_are_read_and_the_parents_counters_not_asked():
    snap = NvmlReader(mig_node().fake_nvml(), initialised=True).read()
    assert snap.errors == 0
    g0, g1 = snap.gpus
    assert g0.mig_slices == 7 and [m.uuid for m in g0.mig] == [MIG_3G, MIG_1G]
    m3, m1 = g0.mig
    assert (m3.gpu_instance_id, m3.compute_instance_id, m3.slices, m3.profile) == (2, 0, 3, "3g.40gb")
    assert (m1.gpu_instance_id, m1.slices, m1.profile) == (13, 1, "1g.10gb")
    assert m3.memory_total == 40192 << 20 and m3.memory_used == 12 * GiB
    assert m3.processes == {201: 8 * GiB, 202: 3 * GiB} and g0.processes == {201: 8 * GiB, 202: 3 * GiB, 211: GiB // 2}
    assert g0.util_gpu_pct is None and g0.process_sm_util is None   # not kept in MIG mode
    assert g1.mig is None and g1.util_gpu_pct == 37


def test_each_mig_instance_is_metered_with_its_share_of_the_gpu(tmp_path):
    train = pod(TRAIN_UID, "train-0", "ml", ["trainer"])
    nb = pod(NB_UID, "nb-0", "notebooks", ["lab"])
    proc = tmp_path / "proc"
    for pid, item, ctr in ((201, train, "trainer"), (202, train, "trainer"), (211, nb, "lab")):
        write_cgroup(proc, pid, item, ctr)
    res = builder(mig_node(), tmp_path / "hami", [train, nb], proc_root=proc).build(1_795_000_000_000)
    mig = {s.pod: s for s in res.tick.slices if s.source == "mig"}
    assert set(mig) == {"train-0", "nb-0"} and all(s.gpu_uuid == UUIDS[0] for s in mig.values())
    t, n = mig["train-0"], mig["nb-0"]
    assert t.alloc_cores_ratio == pytest.approx(3 / 7) and n.alloc_cores_ratio == pytest.approx(1 / 7)
    assert t.alloc_memory_bytes == int(3 / 7 * A100_TOTAL)   # the same share on the memory axis
    assert t.nvml_memory_used_bytes == 11 * GiB and t.process_count == 2 and n.nvml_memory_used_bytes == GiB // 2
    assert not [s for s in res.tick.slices if s.source == "cgroup" and s.gpu_uuid == UUIDS[0]]
    assert res.nvml_errors == 0
    stats = ExporterStats(tenant="acme")
    stats.record(res)
    text = ExporterCollector(stats).exposition().decode()
    alloc = {line.split('pod="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
             for line in text.splitlines() if line.startswith("slicemeter_slice_allocation_ratio{")}
    assert alloc == {"train-0": pytest.approx(3 / 7), "nb-0": pytest.approx(1 / 7)}
    info = [line for line in text.splitlines() if line.startswith("hami_mig_device_info{")]
    assert ('hami_mig_device_info{compute_instance_id="0",container="trainer",device_uuid="%s",gpu_instance_id="2",'
            'mig_uuid="%s",namespace="ml",pod="train-0",profile="3g.40gb",vdevice_index="0",zone="vGPU"} 1'
            % (UUIDS[0], MIG_3G)) in info and len(info) == 2


def test_the_fake_nvml_answers_mig_calls_as_nvml_does():
    nv = mig_node().fake_nvml()
    h0, h1 = nv.nvmlDeviceGetHandleByIndex(0), nv.nvmlDeviceGetHandleByIndex(1)
    assert nv.nvmlDeviceGetMigMode(h0) == [1, 1] and nv.nvmlDeviceGetMigMode(h1) == [0, 0]
    with pytest.raises(pynvml.NVMLError_NotFound):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(h0, 1)           # an empty slot
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(h0, 7)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetUtilizationRates(h0)
    mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h0, 4)
    assert nv.nvmlDeviceIsMigDeviceHandle(mh) and not nv.nvmlDeviceIsMigDeviceHandle(h0)
    assert nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mh) == h0
    attrs = nv.nvmlDeviceGetAttributes(mh)
    assert isinstance(attrs, pynvml.c_nvmlDeviceAttributes) and (attrs.gpuInstanceSliceCount, attrs.memorySizeMB) == (1, 9728)
    assert [p.gpuInstanceId for p in nv.nvmlDeviceGetComputeRunningProcesses(h0)] == [2, 2, 13]
    nv.fail("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_GPU_IS_LOST, gpu=0)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetMemoryInfo(mh)                          # a fault on a GPU reaches its MIG devices
    assert nv.nvmlDeviceGetMemoryInfo(h1).total == A100_TOTAL
    assert A100 in nv.nvmlDeviceGetName(h1)
