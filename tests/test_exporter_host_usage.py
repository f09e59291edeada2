"""A slice's usage from the host side: NVML's processes are attributed to their container
through /proc/<pid>/cgroup, HAMi pods included, so a region that reports nothing for its
processes (slots with hostpid 0 and zero bytes) cannot make its slice look idle.

NVML's side is the simulator's fake pynvml (nvmlDeviceGetComputeRunningProcesses: pid +
usedGpuMemory; nvmlDeviceGetProcessUtilization: per-process smUtil samples); the region is
HAMi-core's v1 layout; /proc is a directory of <pid>/cgroup files (cgroup v2, systemd
driver, containerd). The bill goes through the store's real write path and chargeback.
"""
from __future__ import annotations

from decimal import Decimal

import pytest

from slicemeter.testkit.hami_bytes import Proc
from slicemeter.chargeback.bill import compute_bill
from slicemeter.store import connect
from slicemeter.testkit.ingest_helpers import store_ticks
from slicemeter.simulator.nvml import ProcNow
from slicemeter.testkit.static_node import (A100_TOTAL, GiB, StaticNode, builder, gpu, pod, slice_metrics, write_cgroup,
                                            write_region)

GPU0 = "GPU-3f0c1a2b-4d5e-6f70-8192-a3b4c5d6e7f8"
CLUSTER = "https://acme.example:6443"
NOV_2 = 1_793_577_600_000          # 2026-11-02 00:00 UTC
HOSTILE_UID = "7a1e0c55-0b1d-4c3e-9f00-1e2d3c4b5a69"
HONEST_UID = "2b9d4e11-6c7a-4f8e-8d21-0a1b2c3d4e5f"
WHOLE_UID = "c4d5e6f7-8091-4a2b-8c3d-4e5f60718293"
STRANGER_UID = "99999999-9999-4999-8999-999999999999"

HOSTILE_PID, HONEST_PID, HONEST_PID_2, WHOLE_PID, STRANGER_PID, SYSTEM_PID = 4242, 4343, 4344, 4444, 5555, 6666


def hostile_pod() -> dict:
    return pod(HOSTILE_UID, "llm", "team-x", ["main"], allocated=f"{GPU0},NVIDIA,20480,25:;")


def honest_pod() -> dict:
    return pod(HONEST_UID, "chat", "team-y", ["main"], allocated=f"{GPU0},NVIDIA,4096,10:;")


def hostile_region(hami, hostpid: int = 0, context: int = 0) -> None:
    """Every slot of the container says: no host pid, no bytes, no SM."""
    write_region(hami, HOSTILE_UID, "main", devices=[(GPU0, 20 * GiB, 25)],
                 procs=[Proc(pid=1, hostpid=hostpid, mem=[(context, 0, 0)], sm_util=[0])])


def honest_region(hami) -> None:
    """Two processes of 2 GiB; HAMi-core found the host pid of the first only. The second
    slot keeps hostpid 0, so HAMi-core's watcher never writes its sm_util (it looks slots up
    by the host pid NVML reports)."""
    two = [(300 << 20, 100 << 20, 2 * GiB - (400 << 20))]
    write_region(hami, HONEST_UID, "main", devices=[(GPU0, 4 * GiB, 10)],
                 procs=[Proc(pid=1, hostpid=HONEST_PID, mem=two, sm_util=[3]),
                        Proc(pid=2, hostpid=0, mem=two, sm_util=[0])])


def node(*procs: ProcNow) -> StaticNode:
    return StaticNode(gpus=[gpu(GPU0, used=sum(p.used_bytes for p in procs))], procs={0: list(procs)}, ts_ms=NOV_2)


def hostile_proc() -> ProcNow:
    return ProcNow(pid=HOSTILE_PID, used_bytes=40 * GiB, sm_pct=90, mem_util_pct=40)


def honest_procs() -> list[ProcNow]:
    return [ProcNow(pid=HONEST_PID, used_bytes=2 * GiB, sm_pct=3, mem_util_pct=1),
            ProcNow(pid=HONEST_PID_2, used_bytes=2 * GiB, sm_pct=2, mem_util_pct=1)]


def slices(res) -> dict[str, object]:
    return {s.pod: s for s in res.tick.slices}


metrics = slice_metrics


@pytest.fixture
def two_tenants(tmp_path):
    """The hostile slice and an honest one on one A100 80GB; NVML sees both real processes."""
    hami, proc = tmp_path / "hami", tmp_path / "proc"
    pods = [hostile_pod(), honest_pod()]
    hostile_region(hami)
    honest_region(hami)
    write_cgroup(proc, HOSTILE_PID, pods[0], "main")
    write_cgroup(proc, HONEST_PID, pods[1], "main")
    write_cgroup(proc, HONEST_PID_2, pods[1], "main")
    n = node(hostile_proc(), *honest_procs())
    return n, builder(n, hami, pods, proc_root=proc)


def test_the_hostile_regions_tick_carries_nvmls_figures(two_tenants):
    n, b = two_tenants
    res = b.build(n.ts_ms)
    s = slices(res)["llm"]
    assert s.source == "hami" and s.hami_memory_used_bytes == 0
    assert s.nvml_memory_used_bytes == 40 * GiB and s.sm_util_ratio == pytest.approx(0.90)
    assert res.disagreement[(HOSTILE_UID, "main", GPU0)] is True
    m = metrics(res)
    assert m[("slicemeter_slice_memory_disagreement", "llm")] == 1
    assert m[("slicemeter_slice_memory_used_nvml_bytes", "llm")] == 40 * GiB
    assert m[("slicemeter_slice_usage_ratio", "llm")] == pytest.approx(0.90)
    assert m[("slicemeter_slice_processes", "llm")] == 1          # the region shows none


def test_an_honest_region_that_agrees_with_nvml_is_not_flagged(two_tenants):
    n, b = two_tenants
    res = b.build(n.ts_ms)
    s = slices(res)["chat"]
    # the first process is named by its slot and its cgroup (counted once), the second by its cgroup
    assert s.hami_memory_used_bytes == s.nvml_memory_used_bytes == 4 * GiB
    assert s.sm_util_ratio == pytest.approx(0.05)
    assert res.disagreement[(HONEST_UID, "main", GPU0)] is False
    assert metrics(res)[("slicemeter_slice_memory_disagreement", "chat")] == 0


def test_the_hostile_region_is_billed_from_nvml(two_tenants, tmp_path):
    """An hour of Ticks through the store's write path: the usage basis bills the hostile
    slice by NVML's 90 % SM (0.9 x $2.40), not $0.00 (the two slices' usage stays under the
    whole GPU, so no oversubscription scaling)."""
    n, b = two_tenants
    ticks = []
    for k in range(60):
        n.ts_ms = NOV_2 + k * 60_000           # NVML's per-process samples are new each minute
        ticks.append(b.build(n.ts_ms, interval_ms=60_000).tick)
    con = connect(tmp_path / "bill.duckdb")
    con.execute("INSERT INTO tenants VALUES ('acme', 'ACME', 'tenant-acme', 'acme', ?, 'CC-1')", [CLUSTER])
    store_ticks(con, ticks)
    usage = compute_bill(con, "2026-11", basis="usage").detail
    cost = usage[usage["kind"] == "usage"].set_index("pod")["cost"]
    assert cost["llm"] == Decimal("2.16")
    assert cost["chat"] == Decimal("0.12")     # max(4 GiB / 80 GiB, 5 % SM) x $2.40
    con.close()


def test_a_missing_region_does_not_hide_nvmls_figure(tmp_path):
    """The container deleted its region file: the grant's slice carries NVML's use."""
    hami, proc = tmp_path / "hami", tmp_path / "proc"
    item = hostile_pod()
    write_cgroup(proc, HOSTILE_PID, item, "main")
    n = node(hostile_proc())
    res = builder(n, hami, [item], proc_root=proc).build(n.ts_ms)
    s = slices(res)["llm"]
    assert s.source == "annotation" and s.hami_memory_used_bytes == 0
    assert s.nvml_memory_used_bytes == 40 * GiB and s.sm_util_ratio == pytest.approx(0.90)
    assert metrics(res)[("slicemeter_slice_memory_disagreement", "llm")] == 1


def test_a_process_of_no_known_pod_is_not_attributed(tmp_path):
    """A pod that is not on the kubelet's list and a host process outside kubepods: their
    memory is nobody's slice, and the hostile slice's figure is its own process only."""
    hami, proc = tmp_path / "hami", tmp_path / "proc"
    item = hostile_pod()
    hostile_region(hami)
    write_cgroup(proc, HOSTILE_PID, item, "main")
    write_cgroup(proc, STRANGER_PID, pod(STRANGER_UID, "gone", "team-z", ["main"]), "main")
    (proc / str(SYSTEM_PID)).mkdir(parents=True)
    (proc / str(SYSTEM_PID) / "cgroup").write_text("0::/system.slice/nvidia-persistenced.service\n")
    n = node(hostile_proc(), ProcNow(STRANGER_PID, 8 * GiB, 50, 5), ProcNow(SYSTEM_PID, GiB, 5, 1))
    res = builder(n, hami, [item], proc_root=proc).build(n.ts_ms)
    assert list(slices(res)) == ["llm"]
    assert slices(res)["llm"].nvml_memory_used_bytes == 40 * GiB


def test_a_slot_claiming_another_containers_pid_does_not_take_it(tmp_path):
    """The region's host pid is a whole-GPU pod's process (its cgroup says so): that pod is
    still metered from NVML, and the region's slice gets nothing of it."""
    hami, proc = tmp_path / "hami", tmp_path / "proc"
    item = hostile_pod()
    whole = pod(WHOLE_UID, "train", "team-z", ["trainer"])
    whole["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    hostile_region(hami, hostpid=WHOLE_PID, context=1 << 20)
    write_cgroup(proc, WHOLE_PID, whole, "trainer")
    n = node(ProcNow(WHOLE_PID, 30 * GiB, 60, 20))
    res = builder(n, hami, [item, whole], proc_root=proc).build(n.ts_ms)
    s = slices(res)
    assert s["train"].source == "cgroup" and s["train"].nvml_memory_used_bytes == 30 * GiB
    assert s["llm"].nvml_memory_used_bytes is None and s["llm"].sm_util_ratio == 0.0
    assert s["train"].whole_gpu and s["train"].alloc_memory_bytes == A100_TOTAL


def test_a_pid_that_leaves_nvmls_list_is_looked_up_again(tmp_path):
    """A pid's cgroup is read when NVML first lists it; once it is gone from the list the pid
    may be reused by another container's process, which is attributed to that container."""
    hami, proc = tmp_path / "hami", tmp_path / "proc"
    hostile, honest = hostile_pod(), honest_pod()
    write_cgroup(proc, HOSTILE_PID, hostile, "main")
    n = node(hostile_proc())
    b = builder(n, hami, [hostile, honest], proc_root=proc)
    assert slices(b.build(n.ts_ms))["llm"].nvml_memory_used_bytes == 40 * GiB
    n.procs[0] = []
    n.ts_ms += 10_000
    assert slices(b.build(n.ts_ms))["llm"].nvml_memory_used_bytes is None
    write_cgroup(proc, HOSTILE_PID, honest, "main")       # the pid, reused in the other pod
    n.procs[0] = [ProcNow(HOSTILE_PID, 3 * GiB, 10, 1)]
    n.ts_ms += 10_000
    s = slices(b.build(n.ts_ms))
    assert s["chat"].nvml_memory_used_bytes == 3 * GiB and s["llm"].nvml_memory_used_bytes is None


def test_a_refreshed_pod_list_finds_every_owner_again(tmp_path):
    """Owners are kept per pod list: once a new list lacks the pod, its process
    (same pid, same cgroup) is nobody's, and its whole-GPU slice is gone on the next tick."""
    hami, proc = tmp_path / "hami", tmp_path / "proc"
    whole = pod(WHOLE_UID, "train", "team-z", ["trainer"])
    whole["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    write_cgroup(proc, WHOLE_PID, whole, "trainer")
    n = node(ProcNow(WHOLE_PID, 30 * GiB, 60, 20))
    b = builder(n, hami, [whole], proc_root=proc)
    assert slices(b.build(n.ts_ms))["train"].nvml_memory_used_bytes == 30 * GiB
    n.ts_ms += 10_000
    assert "train" in slices(b.build(n.ts_ms))          # the same list: the kept owner
    (tmp_path / "gpu-node-1-pods.json").write_text('{"items": []}')   # the pod is deleted
    b.pods.refresh()
    n.ts_ms += 10_000
    assert b.build(n.ts_ms).tick.slices == []
