"""A fixed node for the simulator's fake NVML and the exporter's other sources: GPUs, their
processes and MIG devices as a test states them, HAMi region files and a pod list on disk."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import PodCache
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.testkit.hami_bytes import build_region
from slicemeter.simulator.nvml import FakeNvml, GpuNow, MigNow, ProcNow
from slicemeter.common import GiB

A100 = "NVIDIA A100-SXM4-80GB"
A100_TOTAL = 81920 << 20      # what NVML reports for an A100 80GB: 81920 MiB


def gpu(uuid: str, name: str = A100, used: int = 10 * GiB, sm: int = 37, mem_util: int = 21) -> GpuNow:
    return GpuNow(uuid=uuid, name=name, memory_total=A100_TOTAL, memory_used=used, sm_pct=sm, mem_util_pct=mem_util,
                  power_mw=250_000, energy_mj=1_000_000)


@dataclass
class StaticNode:
    """NodeSource for FakeNvml; `mig` puts a GPU in MIG mode: index -> (slots, instances)."""

    gpus: list[GpuNow]
    procs: dict[int, list[ProcNow]] = field(default_factory=dict)
    mig: dict[int, tuple[int, list[MigNow]]] = field(default_factory=dict)
    ts_ms: int = 1_795_000_000_000

    def gpu_count(self) -> int:
        return len(self.gpus)

    def gpu_now(self, index: int) -> GpuNow:
        return self.gpus[index]

    def procs_now(self, index: int) -> list[ProcNow]:
        return self.procs.get(index, [])

    def mig_now(self, index: int) -> tuple[int, list[MigNow]] | None:
        return self.mig.get(index)

    def fake_nvml(self) -> FakeNvml:
        nv = FakeNvml(self)
        nv.nvmlInit()
        return nv


def write_region(hami_dir: Path, pod_uid: str, container: str, **region) -> None:
    d = hami_dir / "containers" / f"{pod_uid}_{container}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "vgpu.cache").write_bytes(bytes(build_region(**region)) + b"\0")   # HAMi-core writes sizeof + 1 bytes


def pod(uid: str, name: str, namespace: str, containers: list[str], allocated: str | None = None) -> dict:
    ann = {"hami.io/vgpu-devices-allocated": allocated} if allocated else {}
    return {"metadata": {"uid": uid, "name": name, "namespace": namespace, "annotations": ann},
            "spec": {"containers": [{"name": c} for c in containers]},
            "status": {"phase": "Running", "containerStatuses": [
                {"name": c, "containerID": "containerd://" + (uid.replace("-", "") + f"{i:02d}").ljust(64, "0")}
                for i, c in enumerate(containers)]}}


def write_cgroup(proc_root: Path, pid: int, pod_item: dict, container: str) -> None:
    """/proc/<pid>/cgroup of a container's process (cgroup v2, systemd driver, containerd)."""
    uid = pod_item["metadata"]["uid"]
    cid = next(s["containerID"].split("://")[1] for s in pod_item["status"]["containerStatuses"] if s["name"] == container)
    (proc_root / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc_root / str(pid) / "cgroup").write_text(
        f"0::/kubepods.slice/kubepods-pod{uid.replace('-', '_')}.slice/cri-containerd-{cid}.scope\n")


def builder(node: StaticNode, hami_dir: Path, pods: list[dict], proc_root: Path | None = None,
            name: str = "gpu-node-1") -> TickBuilder:
    (hami_dir / "containers").mkdir(parents=True, exist_ok=True)
    path = hami_dir.parent / f"{name}-pods.json"
    path.write_text(json.dumps({"items": pods}))
    cache = PodCache(lambda: json.loads(path.read_text()))
    cache.refresh()
    return TickBuilder(name, "https://acme.example:6443", NvmlReader(node.fake_nvml(), initialised=True), str(hami_dir),
                       cache, proc_root=str(proc_root) if proc_root else None)


def slice_metrics(res) -> dict[tuple[str, str], float]:
    """(family, pod) -> value of the per-slice families of a built Tick, as GET /metrics
    renders them."""
    from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats

    stats = ExporterStats(tenant="acme")
    stats.record(res)
    out = {}
    for line in ExporterCollector(stats).exposition().decode().splitlines():
        if line.startswith("slicemeter_slice_") and 'pod="' in line:
            out[(line.split("{", 1)[0], line.split('pod="')[1].split('"')[0])] = float(line.rsplit(" ", 1)[1])
    return out
