"""Sources -> one Tick: GPUs from NVML, slices from HAMi regions, pod annotations and cgroups.

Attribution rules (why each exists):
- A HAMi region counts only if its pod is on the current pod list: HAMi leaves container
  directories behind for minutes, and a deleted pod's slice must vanish on the next tick.
- A slice HAMi granted (pod annotation) but whose container has not touched CUDA yet has
  no region file; it is still reported (source='annotation', used 0) because it is billed.
  A rejected region falls back to the same row with the used fields unknown (null).
- HAMi's numbers come from inside the tenant's container, so they cannot be the only source
  of a slice's usage: every NVML process is attributed to its container through its cgroup
  (HAMi pods included), NVML's memory and SM figures for the container's processes (those
  plus the region's host PIDs that are not another container's) are reported beside
  HAMi's, and the usage figure is the larger of the two. NVML seeing more memory than the
  region reports is flagged as a disagreement.
- GPU processes of pods without HAMi grants are attributed through their cgroup to
  whole-GPU pods.
- On a GPU in MIG mode each MIG device is metered on its own: its processes are
  attributed through their cgroup, and the container holding it is a slice of the parent
  GPU whose allocation is the instance's share of the GPU (its slices / the GPU's slices).
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from slicemeter.exporter.hami import (Region, RegionError, aggregate, discover, open_containers_dir, parse_dir_name,
                           read_region_entry)
from slicemeter.exporter.nvml import GpuSample, MigSample, NvmlReader
from slicemeter.exporter.pods import Grant, PodCache, PodIndex, PodInfo, pid_to_pod
from slicemeter import clock
from slicemeter.common import MiB
from slicemeter.tick import GpuReading, SliceReading, Tick

log = logging.getLogger(__name__)


def _clamp01(v: float | None) -> float | None:
    return None if v is None else min(1.0, max(0.0, v))


def core_limit_ratio(sm_limit_ratio: float | None) -> float | None:
    """A region's sm_limit as a core share: only 0 < limit < 1 is a limit (HAMi-core's watcher
    throttles nothing else), so 0 and 1.0 (100 %, written when there is no limit) are None."""
    return sm_limit_ratio if sm_limit_ratio is not None and 0.0 < sm_limit_ratio < 1.0 else None


def grant_cores_ratio(grant: Grant | None) -> float | None:
    """The grant's core share; 0.0 for a memory-only grant (gpucores 0), None without a grant."""
    return None if grant is None else min(grant.cores, 100) / 100


def allocation_share(s: SliceReading, gpu_memory_total: int | None) -> float | None:
    """Dominant share of the GPU the slice was granted (whole GPU = 1)."""
    if s.whole_gpu:
        return 1.0
    mem = s.alloc_memory_bytes if s.alloc_memory_bytes is not None else s.hami_memory_limit_bytes
    cores = s.alloc_cores_ratio if s.alloc_cores_ratio is not None else core_limit_ratio(s.sm_limit_ratio)
    parts = []
    if mem is not None and gpu_memory_total:
        parts.append(mem / gpu_memory_total)
    if cores is not None:
        parts.append(cores)
    return _clamp01(max(parts)) if parts else None


def usage_share(s: SliceReading, gpu_memory_total: int | None) -> float | None:
    """max(memory / GPU memory, SM share); memory is the larger of HAMi's and NVML's figures:
    a region can under-report its own use, NVML's driver-side figure bounds it from below."""
    known = [m for m in (s.hami_memory_used_bytes, s.nvml_memory_used_bytes) if m is not None]
    mem = max(known) if known else None
    parts = []
    if mem is not None and gpu_memory_total:
        parts.append(mem / gpu_memory_total)
    if s.sm_util_ratio is not None:
        parts.append(s.sm_util_ratio)
    return _clamp01(max(parts)) if parts else None


def memory_disagrees(hami: int | None, nvml: int | None, tol_bytes: int, tol_ratio: float) -> bool | None:
    if hami is None or nvml is None:
        return None
    return abs(hami - nvml) > max(tol_bytes, tol_ratio * max(hami, nvml))


@dataclass(frozen=True, slots=True)
class ProcOwner:
    """The container a GPU process belongs to, from its cgroup."""

    uid: str
    container: str
    pod: PodInfo | None
    named: bool    # the container name is known (the pod's status, or its only GPU container)


@dataclass(slots=True)
class GpuProcesses:
    """The owners of the processes NVML lists on one GPU."""

    owner: dict[int, ProcOwner | None] = field(default_factory=dict)   # None: no listed pod's, or no cgroup
    by_container: dict[tuple[str, str], set[int]] = field(default_factory=dict)

    def add(self, pid: int, owner: ProcOwner | None) -> None:
        self.owner[pid] = owner
        if owner is not None:
            self.by_container.setdefault((owner.uid, owner.container), set()).add(pid)

    def of(self, uid: str, container: str) -> set[int]:
        return self.by_container.get((uid, container), set())


ProcOwners = dict[str, GpuProcesses]   # by GPU uuid
_NO_PROCESSES = GpuProcesses()


@dataclass(frozen=True, slots=True)
class NvmlUsage:
    """NVML's figures for a set of host pids on one GPU; None where NVML has none."""

    memory_bytes: int | None = None
    sm_ratio: float | None = None
    processes: int | None = None   # how many of the pids NVML lists as compute processes


def nvml_usage(g: GpuSample | None, pids: set[int]) -> NvmlUsage:
    if g is None or not pids:
        return NvmlUsage()
    listed = None if g.processes is None else [p for p in pids if p in g.processes]
    own = [g.process_sm_util[p] for p in pids if p in g.process_sm_util] if g.process_sm_util else []
    return NvmlUsage(memory_bytes=None if listed is None else sum(g.processes[p] for p in listed),
                     sm_ratio=min(100.0, sum(own)) / 100 if own else None,
                     processes=None if listed is None else len(listed))


def larger(a, b):
    """max of two figures where either may be unknown (None)."""
    return b if a is None else a if b is None else max(a, b)


@dataclass(slots=True)
class BuildResult:
    tick: Tick
    duration_s: float
    nvml_errors: int = 0
    pod_errors: int = 0
    region_errors: list[tuple[str | None, str | None, str, RegionError]] = field(default_factory=list)  # uid, container, entry, error
    hami_ok: dict[tuple[str, str], bool] = field(default_factory=dict)
    # containers whose region was read but lacked a device or slot: their other grants' use is unknown
    hami_partial: set[tuple[str, str]] = field(default_factory=set)
    disagreement: dict[tuple[str, str, str], bool] = field(default_factory=dict)
    # (pod uid, container, parent GPU uuid) -> the MIG device the slice ran on
    mig: dict[tuple[str, str, str], MigSample] = field(default_factory=dict)
    pods: PodIndex | None = None   # the pod list the Tick was attributed with (HAMi's grants)
    nvml_unsupported: frozenset[tuple[int | None, str]] = frozenset()   # (GPU index, call) NVML does not offer


class TickBuilder:
    def __init__(
        self,
        node: str,
        cluster: str,
        nvml: NvmlReader,
        hami_dir: str,
        pods: PodCache,
        proc_root: str | None = "/proc",
        tolerance_bytes: int = 256 * MiB,
        tolerance_ratio: float = 0.10,
        pid_alive: Callable[[int], bool] | None = None,
    ):
        self.node, self.cluster, self.nvml, self.hami_dir, self.pods = node, cluster, nvml, hami_dir, pods
        self.proc_root = proc_root
        self.tolerance_bytes, self.tolerance_ratio = tolerance_bytes, tolerance_ratio
        self.pid_alive = pid_alive
        self._logged: set[tuple[str, str]] = set()
        self._pod_errors_seen = 0
        # pid -> pid_to_pod(pid), read when NVML first lists the pid and kept while each tick
        # asks for it again: a process does not leave its container's cgroup, and re-reading
        # every GPU process's cgroup each tick costs more than the rest of a busy node's Tick
        self._cgroups: dict[int, tuple[str, str | None] | None] = {}
        self._cgroups_prev: dict[int, tuple[str, str | None] | None] = {}

    def build(self, ts_ms: int | None = None, interval_ms: int = 10_000) -> BuildResult:
        t0 = time.perf_counter()
        ts_ms = clock.now_ms() if ts_ms is None else ts_ms
        snap = self.nvml.read()
        gpus = {g.uuid: g for g in snap.gpus}
        devmem = {g.uuid: g.memory_total for g in snap.gpus if g.memory_total}
        pods = self.pods.get()
        res = BuildResult(tick=Tick(node=self.node, cluster=self.cluster, ts_ms=ts_ms, interval_ms=interval_ms),
                          duration_s=0.0, nvml_errors=snap.errors, pods=pods,
                          nvml_unsupported=frozenset(self.nvml.unsupported))
        pod_err_total = self.pods.errors_total
        res.pod_errors, self._pod_errors_seen = pod_err_total - self._pod_errors_seen, pod_err_total
        slices = res.tick.slices
        seen: set[tuple[str, str, str]] = set()
        hami_pids: set[int] = set()

        self._cgroups_prev, self._cgroups = self._cgroups, {}
        owners = self._process_owners(snap.gpus, pods) if self.proc_root is not None else {}
        files, dir_errors = discover(self.hami_dir)
        for entry, err in dir_errors:
            self._dir_error(res, pods, entry, err)
        root_fd = open_containers_dir(self.hami_dir) if files else None
        try:
            self._hami_slices(res, files, root_fd, pods, gpus, devmem, snap, seen, hami_pids, ts_ms, owners)
        finally:
            if root_fd is not None:
                os.close(root_fd)

        if self.proc_root is not None:
            self._mig_slices(res, snap.gpus, pods, seen)
        self._annotation_slices(res, pods.pods.values(), gpus, seen, owners)
        if self.proc_root is not None:
            self._cgroup_slices(res, snap.gpus, pods, hami_pids, owners)

        counts: dict[str, int] = {}
        for s in slices:
            counts[s.gpu_uuid] = counts.get(s.gpu_uuid, 0) + 1
        for g in snap.gpus:
            res.tick.gpus.append(_gpu_reading(g, counts.get(g.uuid, 0)))
        res.duration_s = time.perf_counter() - t0
        return res

    def _hami_slices(self, res, files, root_fd, pods, gpus, devmem, snap, seen, hami_pids, ts_ms, owners) -> None:
        slices = res.tick.slices
        # every GPU process on the node, when NVML could list them all (else: unknown, keep slots)
        nvml_pids = None
        if snap.gpus and all(g.processes is not None for g in snap.gpus):
            nvml_pids = {pid for g in snap.gpus for pid in g.processes}
        for f in files:
            pod = pods.pods.get(f.pod_uid)
            if pods.fetched and pod is None:
                continue   # stale directory of a deleted pod
            if pod is not None and f.container in pod.finished:
                continue   # a completed init container's region stays behind; nothing runs there
            if root_fd is None:
                region: Region | RegionError = RegionError("unreadable", "HAMi containers directory vanished")
            else:
                region = read_region_entry(root_fd, f, devmem, now_s=ts_ms / 1000)
            if isinstance(region, RegionError):
                self._region_error(res, f.pod_uid, f.container, f.dir_name, region)
                res.hami_ok[(f.pod_uid, f.container)] = False
                continue
            key = (f.pod_uid, f.container)
            res.hami_ok[key] = True
            skipped = [err for _, err in region.device_errors]
            skipped += [RegionError("seqlock_stuck", f"slot {i} stayed odd (its writer died mid-update)")
                        for i in region.stuck_slots]
            kept = region.devices
            if snap.gpus:
                kept = [d for d in region.devices if d.uuid in gpus]
                skipped += [RegionError("unknown_gpu", f"device {d.index}: UUID {d.uuid} is not a GPU of this node")
                            for d in region.devices if d.uuid not in gpus]
            for err in skipped:
                self._region_error(res, f.pod_uid, f.container, f.dir_name, err)
            if skipped:
                res.hami_partial.add(key)
            grants = _grants_for(pod, f.container)
            devices = kept
            if nvml_pids is not None:
                # HAMi-core frees an exited process's slot lazily, so its memory would stay at the
                # high-water mark: drop a slot whose host pid NVML no longer lists and /proc lacks.
                live = [p for p in region.procs
                        if not p.hostpid or p.hostpid in nvml_pids or (self.pid_alive is not None and self.pid_alive(p.hostpid))]
                if len(live) != len(region.procs):
                    devices = aggregate(kept, live)
            age = max(0.0, ts_ms / 1000 - region.last_kernel_time) if region.last_kernel_time else None
            for dev in devices:
                g = gpus.get(dev.uuid)
                grant = next((gr for gr in grants if gr.uuid == dev.uuid), None)
                on_gpu = owners.get(dev.uuid, _NO_PROCESSES)
                # a slot's host pid counts unless its cgroup says it is another container's
                claimed = {p for p in dev.hostpids if not _foreign(on_gpu.owner.get(p), f.pod_uid, f.container)}
                hami_pids.update(claimed)
                nv = nvml_usage(g, claimed | on_gpu.of(f.pod_uid, f.container))
                s = SliceReading(
                    pod_uid=f.pod_uid, container=f.container, gpu_uuid=dev.uuid,
                    pod=pod.name if pod else None, namespace=pod.namespace if pod else None,
                    vdevice_index=dev.index, hami_memory_limit_bytes=dev.limit_bytes,
                    hami_memory_used_bytes=dev.used_bytes, hami_context_bytes=dev.context_bytes,
                    hami_module_bytes=dev.module_bytes, hami_buffer_bytes=dev.buffer_bytes,
                    sm_limit_ratio=dev.sm_limit_pct / 100 if dev.sm_limit_pct else None,
                    sm_util_ratio=_clamp01(larger(dev.sm_util_pct / 100, nv.sm_ratio)), last_kernel_age_s=age,
                    process_count=larger(dev.processes, nv.processes), nvml_memory_used_bytes=nv.memory_bytes,
                    alloc_memory_bytes=grant.mem_mib * MiB if grant else None,
                    alloc_cores_ratio=grant_cores_ratio(grant),
                    whole_gpu=bool(pod and f.container in pod.whole_gpus), source="hami",
                )
                slices.append(s)
                seen.add((f.pod_uid, f.container, dev.uuid))
                res.disagreement[(f.pod_uid, f.container, dev.uuid)] = memory_disagrees(
                    s.hami_memory_used_bytes, nv.memory_bytes, self.tolerance_bytes, self.tolerance_ratio)

    def _dir_error(self, res: BuildResult, pods, entry: str, err: RegionError) -> None:
        """A container directory that could not be read (two .cache files, a link): when it
        names a container of a listed pod, that container's use is unknown, not zero."""
        parsed = parse_dir_name(entry)
        if parsed is None or pods.pods.get(parsed[0]) is None:
            self._region_error(res, None, None, entry, err)
            return
        self._region_error(res, parsed[0], parsed[1], entry, err)
        res.hami_ok[parsed] = False

    def _region_error(self, res: BuildResult, uid: str | None, container: str | None, entry: str, err: RegionError) -> None:
        res.region_errors.append((uid, container, entry, err))
        key = (entry, err.reason)
        if key not in self._logged:   # one log line per container and reason, not one per tick
            self._logged.add(key)
            log.warning("HAMi region %s rejected: %s", entry, err)

    def _annotation_slices(self, res: BuildResult, pods, gpus: dict[str, GpuSample], seen, owners: ProcOwners) -> None:
        for pod in pods:
            for cname, grants in pod.grants.items():
                if cname in pod.finished:
                    continue   # an init container that completed holds its grant no more
                failed = res.hami_ok.get((pod.uid, cname)) is False or (pod.uid, cname) in res.hami_partial
                for vi, gr in enumerate(grants):
                    if (pod.uid, cname, gr.uuid) in seen or (gpus and gr.uuid not in gpus):
                        continue
                    seen.add((pod.uid, cname, gr.uuid))
                    used = None if failed else 0   # no region yet: nothing used; rejected: unknown
                    # no region is no proof of no use: NVML's figure for the container's processes
                    nv = nvml_usage(gpus.get(gr.uuid), owners.get(gr.uuid, _NO_PROCESSES).of(pod.uid, cname))
                    res.disagreement[(pod.uid, cname, gr.uuid)] = memory_disagrees(
                        used, nv.memory_bytes, self.tolerance_bytes, self.tolerance_ratio)
                    res.tick.slices.append(SliceReading(
                        pod_uid=pod.uid, container=cname, gpu_uuid=gr.uuid, pod=pod.name, namespace=pod.namespace,
                        vdevice_index=vi, hami_memory_limit_bytes=gr.mem_mib * MiB,
                        hami_memory_used_bytes=used, hami_context_bytes=used, hami_module_bytes=used,
                        hami_buffer_bytes=used, sm_limit_ratio=core_limit_ratio(gr.cores / 100),
                        sm_util_ratio=_clamp01(larger(None if failed else 0.0, nv.sm_ratio)),
                        process_count=larger(None if failed else 0, nv.processes), nvml_memory_used_bytes=nv.memory_bytes,
                        alloc_memory_bytes=gr.mem_mib * MiB, alloc_cores_ratio=grant_cores_ratio(gr),
                        whole_gpu=cname in pod.whole_gpus, source="annotation",
                    ))

    def _owner(self, pid: int, pods, gpu_uuid: str | None = None) -> ProcOwner | None:
        """The container of a host pid through its cgroup; None: not a live pod's.
        `gpu_uuid`: the GPU it runs on, which names the container when only one of the pod's
        containers was granted that GPU (the pod's status may not list the container id yet)."""
        found = self._cgroup_of(pid)
        if found is None:
            return None
        uid, cid = found
        pod: PodInfo | None = pods.pods.get(uid)
        if pod is None and pods.fetched:
            return None   # a deleted pod's process
        name = pod.container_ids.get(cid) if pod and cid else None
        if name is None and pod and len(pod.whole_gpus) == 1:
            name = next(iter(pod.whole_gpus))
        if name is None and pod and gpu_uuid is not None:
            granted = [c for c, gs in pod.grants.items() if c not in pod.finished and any(g.uuid == gpu_uuid for g in gs)]
            name = granted[0] if len(granted) == 1 else None
        return ProcOwner(uid, name or (cid[:12] if cid else "unknown"), pod, named=name is not None)

    def _cgroup_of(self, pid: int) -> tuple[str, str | None] | None:
        if pid not in self._cgroups:
            if pid in self._cgroups_prev:
                self._cgroups[pid] = self._cgroups_prev[pid]
            else:
                self._cgroups[pid] = pid_to_pod(pid, self.proc_root)
        return self._cgroups[pid]

    def _process_owners(self, gpus: list[GpuSample], pods) -> ProcOwners:
        """The owner of every process NVML lists on a GPU outside MIG mode (MIG devices: _mig_slices)."""
        out: ProcOwners = {}
        for g in gpus:
            if not g.processes or g.mig is not None:
                continue
            on_gpu = out[g.uuid] = GpuProcesses()
            for pid in g.processes:
                on_gpu.add(pid, self._owner(pid, pods, g.uuid))
        return out

    def _mig_slices(self, res: BuildResult, gpus: list[GpuSample], pods, seen) -> None:
        for g in gpus:
            if not g.mig or not g.mig_slices:
                continue
            for m in g.mig:
                owners: dict[tuple[str, str], list[int]] = {}
                pod_of: dict[str, PodInfo | None] = {}
                for pid in m.processes or ():
                    found = self._owner(pid, pods)
                    if found is not None:
                        pod_of[found.uid] = found.pod
                        owners.setdefault((found.uid, found.container), []).append(pid)
                # the instance's share on both axes, so every allocation policy bills slices / GPU slices
                share = min(1.0, m.slices / g.mig_slices) if m.slices else None
                mem_share = int(share * g.memory_total) if share is not None and g.memory_total else None
                for (uid, cname), pids in owners.items():
                    pod = pod_of[uid]
                    key = (uid, cname, g.uuid)
                    seen.add(key)
                    res.mig[key] = m
                    res.tick.slices.append(SliceReading(
                        pod_uid=uid, container=cname, gpu_uuid=g.uuid, pod=pod.name if pod else None,
                        namespace=pod.namespace if pod else None, vdevice_index=0, process_count=len(pids),
                        nvml_memory_used_bytes=sum(m.processes[p] for p in pids),
                        alloc_memory_bytes=mem_share, alloc_cores_ratio=share, whole_gpu=False, source="mig",
                    ))

    def _cgroup_slices(self, res: BuildResult, gpus: list[GpuSample], pods, hami_pids: set[int],
                       proc_owners: ProcOwners) -> None:
        for g in gpus:
            if g.uuid not in proc_owners:
                continue   # no processes, or a MIG GPU (its processes belong to its instances)
            owners: dict[tuple[str, str], list[int]] = {}
            for pid, found in proc_owners[g.uuid].owner.items():
                if pid in hami_pids or found is None or found.pod is not None and found.pod.hami:
                    continue   # a region's, gone, or a HAMi pod's (its slices come from HAMi/annotation)
                owners.setdefault((found.uid, found.container), []).append(pid)
            for (uid, cname), pids in owners.items():
                pod = pods.pods.get(uid)
                own = [g.process_sm_util[p] for p in pids if g.process_sm_util and p in g.process_sm_util]
                if own:
                    sm = min(100.0, sum(own)) / 100
                elif len(owners) == 1 and g.util_gpu_pct is not None:
                    sm = g.util_gpu_pct / 100   # the only tenant of the GPU
                else:
                    sm = None
                res.tick.slices.append(SliceReading(
                    pod_uid=uid, container=cname, gpu_uuid=g.uuid, pod=pod.name if pod else None,
                    namespace=pod.namespace if pod else None, sm_util_ratio=_clamp01(sm), process_count=len(pids),
                    nvml_memory_used_bytes=sum(g.processes[p] for p in pids),
                    alloc_memory_bytes=g.memory_total, alloc_cores_ratio=1.0, whole_gpu=True, source="cgroup",
                ))


def _foreign(owner: ProcOwner | None, uid: str, container: str) -> bool:
    """Whether a process's cgroup places it in another container than (uid, container)."""
    return owner is not None and (owner.uid != uid or owner.named and owner.container != container)



def _grants_for(pod: PodInfo | None, container: str) -> list[Grant]:
    return pod.grants.get(container, []) if pod is not None else []


def _gpu_reading(g: GpuSample, slice_count: int) -> GpuReading:
    """NVML values bounded to what is physically possible (a driver glitch is not a reading)."""
    used = g.memory_used
    if used is not None and (used < 0 or (g.memory_total and used > g.memory_total)):
        used = None
    return GpuReading(
        gpu_uuid=g.uuid, gpu_index=g.index, model=g.name, memory_total_bytes=g.memory_total, memory_used_bytes=used,
        sm_util_ratio=_clamp01(g.util_gpu_pct / 100) if g.util_gpu_pct is not None else None,
        mem_util_ratio=_clamp01(g.util_mem_pct / 100) if g.util_mem_pct is not None else None,
        power_watts=g.power_w if g.power_w is not None and 0 <= g.power_w < 5000 else None,
        energy_joules=g.energy_j if g.energy_j is not None and g.energy_j >= 0 else None,
        slice_count=slice_count,
    )
