"""SimulatedNode: determinism, fake NVML consistent with the region files, pods that come and go."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from slicemeter.testkit.hami_reader import read_region
from slicemeter.simulator import workload as wl
from slicemeter.simulator.node import SimulatedNode
from slicemeter.simulator.nvml import pynvml   # the real pynvml (its deprecation warning silenced there)
from slicemeter.common import MiB
from slicemeter.simulator.scenario import load_scenario, parse_scenario

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "examples/demo.yaml"
TS = 1_793_973_600_000          # 2026-11-06T14:00:00Z, a Friday afternoon


@pytest.fixture(scope="module")
def demo():
    return load_scenario(DEMO)


def _region_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.cache"))}


def _nvml_snapshot(node: SimulatedNode) -> list:
    nv = node.nvml
    out = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        m, u = nv.nvmlDeviceGetMemoryInfo(h), nv.nvmlDeviceGetUtilizationRates(h)
        out.append((nv.nvmlDeviceGetUUID(h), m.used, u.gpu, u.memory, nv.nvmlDeviceGetPowerUsage(h),
                    nv.nvmlDeviceGetTotalEnergyConsumption(h),
                    [(p.pid, p.usedGpuMemory) for p in nv.nvmlDeviceGetComputeRunningProcesses(h)]))
    return out


def test_same_seed_same_bytes_other_seed_other_bytes(demo, tmp_path):
    runs = {}
    for tag, seed in (("a", 5), ("b", 5), ("c", 6)):
        node = SimulatedNode(demo, "gpu-node-1", tmp_path / tag, seed=seed)
        node.advance(TS)
        node.nvml.nvmlInit()
        runs[tag] = (_region_files(tmp_path / tag), _nvml_snapshot(node), node.pods())
    assert runs["a"][0] and runs["a"] == runs["b"]
    common = runs["a"][0].keys() & runs["c"][0].keys()      # batch schedules move with the seed
    assert len(common) >= 4
    # every busy container's bytes move with the seed (an idle reservation's need not)
    assert sum(runs["a"][0][k] != runs["c"][0][k] for k in common) >= len(common) - 1
    assert runs["a"][1] != runs["c"][1]


def test_adding_a_pod_changes_nobody_else(demo, tmp_path):
    text = DEMO.read_text().replace(
        "  - name: gpu-node-2\n",
        "      - name: newcomer\n        namespace: ml-research\n        containers:\n"
        "          - {name: c, resources: {nvidia.com/gpumem: 8192}, devices: [3], workload: steady-training}\n\n"
        "  - name: gpu-node-2\n", 1)
    bigger = parse_scenario(text)
    assert len(bigger.node("gpu-node-1").pods) == len(demo.node("gpu-node-1").pods) + 1
    a = SimulatedNode(demo, "gpu-node-1", tmp_path / "a", seed=1)
    b = SimulatedNode(bigger, "gpu-node-1", tmp_path / "b", seed=1)
    a.advance(TS)
    b.advance(TS)
    fa, fb = _region_files(tmp_path / "a"), _region_files(tmp_path / "b")
    assert len(fb) == len(fa) + 1
    assert all(fb[k] == v for k, v in fa.items())


def test_nvml_agrees_with_the_region_files(demo, tmp_path):
    node = SimulatedNode(demo, "gpu-node-1", tmp_path, seed=2)
    node.advance(TS)
    nv = node.nvml
    nv.nvmlInit()
    regions = [read_region(p.read_bytes()) for p in tmp_path.rglob("*.cache")]
    assert regions
    assert nv.nvmlSystemGetDriverVersion()
    busy = 0
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        uuid = nv.nvmlDeviceGetUUID(h)
        assert nv.nvmlDeviceGetName(h) == "NVIDIA A100-SXM4-80GB"
        # HAMi's slots touching this GPU, by host PID
        slots = {}
        for r in regions:
            if uuid in r["uuids"]:
                d = r["uuids"].index(uuid)
                for p in r["procs"]:
                    if p["used"][d]["total"]:
                        slots[p["hostpid"]] = (p["monitorused"][d], p["sm_util"][d])
        procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
        assert {p.pid for p in procs} == set(slots)
        for p in procs:
            assert p.usedGpuMemory == slots[p.pid][0]
        mem = nv.nvmlDeviceGetMemoryInfo(h)
        assert mem.total == 81920 * MiB and mem.used + mem.free == mem.total
        assert mem.used == sum(p.usedGpuMemory for p in procs) + wl.DRIVER_OVERHEAD_MIB * MiB
        util = nv.nvmlDeviceGetUtilizationRates(h)
        assert util.gpu == min(100, sum(sm for _, sm in slots.values()))
        busy += util.gpu > 0
        if procs:
            samples = nv.nvmlDeviceGetProcessUtilization(h, 0)
            assert {(s.pid, s.smUtil) for s in samples} == {(pid, v[1]) for pid, v in slots.items()}
            with pytest.raises(pynvml.NVMLError_NotFound):
                nv.nvmlDeviceGetProcessUtilization(h, TS * 1000)
        power = nv.nvmlDeviceGetPowerUsage(h) / 1000
        assert 55 <= power <= 410
    assert busy >= 2


def test_energy_counter_grows_with_power(demo, tmp_path):
    node = SimulatedNode(demo, "gpu-node-5", tmp_path, seed=0)
    nv = node.nvml
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    node.advance(TS)
    e0, p0 = nv.nvmlDeviceGetTotalEnergyConsumption(h), nv.nvmlDeviceGetPowerUsage(h)
    node.advance(TS + 60_000)
    e1 = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    assert e1 > e0
    assert (e1 - e0) / 60 == pytest.approx(p0, rel=0.08)     # mJ/s = mW, within the power noise


def test_nvml_errors_like_pynvml(tmp_path):
    text = (DEMO.read_text().replace("  - name: gpu-node-4\n    tenant: globex\n",
            "  - name: gpu-node-4\n    tenant: globex\n    nvml_unsupported: [nvmlDeviceGetTotalEnergyConsumption]\n"))
    s = parse_scenario(text)
    nv = SimulatedNode(s, "gpu-node-4", tmp_path).nvml
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    nv.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetHandleByIndex(2)
    h = nv.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetTotalEnergyConsumption(h)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nv.nvmlDeviceGetEncoderUtilization(h)          # outside the fake's subset
    assert nv.nvmlDeviceGetPowerUsage(h) > 0         # the rest of the GPU still answers
    nv.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError):
        nv.nvmlDeviceGetName(h)


def test_batch_pods_come_and_go(demo, tmp_path):
    node = SimulatedNode(demo, "gpu-node-5", tmp_path, seed=0)
    spec = next(p for p in node.spec.pods if p.batch and p.lifecycle is None)   # a batch-jobs pod
    ci = next(i for i, (_, p) in enumerate(node.model.container_pod) if p is spec)
    t = TS + np.arange(0, 86400, 300) * 1000
    present = node.model.state(t).containers.present[:, ci]
    assert present.any() and not present.all()
    on = int(t[np.argmax(present)])
    off = int(t[np.argmax(~present & (t > on))])
    node.advance(on)
    names = [p["metadata"]["name"] for p in node.pods()["items"]]
    run = next(n for n in names if n.startswith(spec.name + "-"))
    uid = next(p["metadata"]["uid"] for p in node.pods()["items"] if p["metadata"]["name"] == run)
    d = tmp_path / "containers" / f"{uid}_job"
    assert d.is_dir() and read_region(next(d.glob("*.cache")).read_bytes())["proc_num"] == 1
    node.advance(off)
    assert not d.exists()
    assert not any(p["metadata"]["name"].startswith(spec.name) for p in node.pods()["items"])
    # every other standing pod is still listed (sessions of a notebook come and go on their own)
    assert {p.name for p in node.spec.pods if not p.batch} <= {p["metadata"]["name"] for p in node.pods()["items"]}
