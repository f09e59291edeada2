"""Attribution strategies: which container a GPU's use belongs to, one strategy per source.

Each strategy reads one Tick's `Sources` and appends its slices to the `Draft`; they run
in this order, and a later one never reports a (pod, container, GPU) an earlier one did:

- `RegionStrategy`: HAMi-core's region files. A region counts only if its pod is on the
  current pod list (HAMi leaves directories behind for minutes; a deleted pod's slice must
  vanish on the next tick). HAMi's numbers come from inside the tenant's container, so NVML's
  figures for the container's processes (its cgroup's, plus the region's host pids that are
  not another container's) are reported beside them; NVML seeing more memory is flagged.
- `MigStrategy`: on a GPU in MIG mode each MIG device is metered on its own: its processes
  are attributed through their cgroup, and the container is a slice of the parent GPU whose
  allocation is the instance's share (its slices / the GPU's slices).
- `AnnotationStrategy`: a slice HAMi granted (pod annotation) but without a region yet is
  still reported (used 0) because it is billed; a rejected region falls back to the same row
  with the used fields unknown (null).
- `DraStrategy`: slices granted through ResourceClaims (docs/dra.md), one per (container,
  claim, device), with their allocation shares; usage from the claim's HAMi region, else NVML
  through cgroups, else unknown. adminAccess results get no slice, and their processes no
  cgroup slice either: monitoring is not billed.
- `CgroupStrategy`: GPU processes of pods without HAMi grants or DRA slices, through their
  cgroup, are whole-GPU pods.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol

from fractions import Fraction

from slicemeter.exporter.sources.dra import HAMI_DRIVER, DraSlice, ResourceClaim
from slicemeter.exporter.sources.hami import ClaimRegionFile, DeviceView, Region, RegionError, RegionFile, aggregate
from slicemeter.exporter.sources.nvml import GpuSample, MigSample, NvmlSnapshot
from slicemeter.exporter.sources.pods import Grant, PodIndex, PodInfo
from slicemeter.common import MiB
from slicemeter.exporter.assemble.shares import clamp01, core_limit_ratio, grant_cores_ratio, larger, memory_disagrees
from slicemeter.tick import GpuReading, SliceReading


class ProcOwner(NamedTuple):   # a tuple: one is made per GPU process per tick
    """The container a GPU process belongs to, from its cgroup."""

    uid: str
    container: str
    pod: PodInfo | None
    named: bool    # the container name is known (the pod's status, or its only GPU container)

    def foreign_to(self, uid: str, container: str) -> bool:
        """Whether the cgroup places the process in another container than (uid, container)."""
        return self.uid != uid or self.named and self.container != container


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
        return self.by_container.get((uid, container), _NO_PIDS)


_NO_PIDS: set[int] = set()
_NO_PROCESSES = GpuProcesses()
OwnerOf = Callable[[int, PodIndex, "str | None"], "ProcOwner | None"]   # (pid, pods, GPU uuid) -> owner


class NvmlUsage(NamedTuple):   # a tuple: one is made per slice per tick
    """NVML's figures for a set of host pids on one GPU; None where NVML has none."""

    memory_bytes: int | None = None
    sm_ratio: float | None = None
    processes: int | None = None   # how many of the pids NVML lists as compute processes


_NO_USAGE = NvmlUsage()


def nvml_usage(g: GpuSample | None, pids: set[int]) -> NvmlUsage:
    if g is None or not pids:
        return _NO_USAGE
    procs, util = g.processes, g.process_sm_util
    memory = listed = None
    if procs is not None:
        memory = listed = 0
        for p in pids:
            if p in procs:
                memory += procs[p]
                listed += 1
    own = [util[p] for p in pids if p in util] if util else ()
    return NvmlUsage(memory, min(100.0, sum(own)) / 100 if own else None, listed)   # positional: a keyword tuple costs 4x


@dataclass(slots=True)
class DraInputs:
    """The node's DRA allocation, as one Tick reads it."""

    slices: list[DraSlice]                             # dra.allocation_slices for the live pods
    gpu_of: dict[tuple[str, str, str], str]            # (driver, pool, device) -> the Tick's gpu_uuid
    claim_regions: list[tuple[ClaimRegionFile, Region | RegionError]]   # HAMi claims' regions, read
    gpus: dict[str, GpuReading]                        # gpu_uuid -> the identity row of a published device
    claims: tuple[ResourceClaim, ...]                  # the claims slices was made from (device conditions)


@dataclass(slots=True)
class Sources:
    """What one Tick is attributed from, read once at its start."""

    ts_ms: int
    snapshot: NvmlSnapshot
    pods: PodIndex
    owners: dict[str, GpuProcesses]          # GPU uuid -> its processes' owners (none without a host /proc)
    regions: list[tuple[RegionFile, Region | RegionError]]   # the listed pods' region files, read
    owner_of: OwnerOf | None                 # None: no host /proc, no cgroup attribution
    dra: DraInputs | None = None             # None: DRA not read (or not yet)
    gpus: dict[str, GpuSample] = field(init=False)

    def __post_init__(self) -> None:
        self.gpus = {g.uuid: g for g in self.snapshot.gpus}

    def nvml_pids(self) -> set[int] | None:
        """Every GPU process on the node, when NVML could list them all (else: unknown)."""
        gpus = self.snapshot.gpus
        if gpus and all(g.processes is not None for g in gpus):
            return {pid for g in gpus for pid in g.processes}
        return None


@dataclass(slots=True)
class Draft:
    """The Tick's slices as the strategies add them, and what they tell each other."""

    slices: list[SliceReading]
    region_error: Callable[[str | None, str | None, str, RegionError], None]   # (uid, container, entry, error)
    hami_ok: dict[tuple[str, str], bool]
    hami_partial: set[tuple[str, str]]   # a region read without some device or slot: that use is unknown
    disagreement: dict[tuple[str, str, str], bool | None]
    mig: dict[tuple[str, str, str], MigSample]   # (pod uid, container, parent GPU uuid) -> its MIG device
    seen: set[tuple[str, str, str]] = field(default_factory=set)   # (pod uid, container, GPU uuid) reported
    hami_pids: set[int] = field(default_factory=set)   # host pids a region accounts for
    # slices whose HAMi MIG allocation NVML's MIG devices contradict -> what differs
    mig_disagreement: dict[tuple[str, str, str], str] = field(default_factory=dict)


class Strategy(Protocol):
    name: str

    def attribute(self, src: Sources, out: Draft) -> None: ...


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far HAMi's and NVML's memory may differ before the slice is flagged."""

    bytes: int
    ratio: float

    def disagrees(self, hami: int | None, nvml: int | None) -> bool | None:
        return memory_disagrees(hami, nvml, self.bytes, self.ratio)


class RegionStrategy:
    name = "region"

    def __init__(self, tolerance: Tolerance, pid_alive: Callable[[int], bool] | None = None):
        self.tolerance = tolerance
        self.pid_alive = pid_alive

    def attribute(self, src: Sources, out: Draft) -> None:
        nvml_pids = src.nvml_pids()
        for f, region in src.regions:
            key = (f.pod_uid, f.container)
            if isinstance(region, RegionError):
                out.region_error(f.pod_uid, f.container, f.dir_name, region)
                out.hami_ok[key] = False
                continue
            out.hami_ok[key] = True
            devices = self._known_devices(src, out, f, region)
            if nvml_pids is not None:
                devices = self._without_exited(region, devices, nvml_pids)
            pod = src.pods.pods.get(f.pod_uid)
            age = max(0.0, src.ts_ms / 1000 - region.last_kernel_time) if region.last_kernel_time else None
            for dev in devices:
                self._slice(src, out, f, pod, dev, age)

    @staticmethod
    def _known_devices(src: Sources, out: Draft, f: RegionFile, region: Region) -> list:
        """The region's devices on this node's GPUs; every skipped device or slot is reported."""
        kept = region.devices
        if src.snapshot.gpus:
            kept = [d for d in region.devices if d.uuid in src.gpus]
        if not region.device_errors and not region.stuck_slots and len(kept) == len(region.devices):
            return kept   # the whole region read, on this node's GPUs: nothing to report
        skipped = [err for _, err in region.device_errors]
        skipped += [RegionError("seqlock_stuck", f"slot {i} stayed odd (its writer died mid-update)")
                    for i in region.stuck_slots]
        skipped += [RegionError("unknown_gpu", f"device {d.index}: UUID {d.uuid} is not a GPU of this node")
                    for d in region.devices if d.uuid not in src.gpus] if src.snapshot.gpus else []
        for err in skipped:
            out.region_error(f.pod_uid, f.container, f.dir_name, err)
        if skipped:
            out.hami_partial.add((f.pod_uid, f.container))
        return kept

    def _without_exited(self, region: Region, devices: list, nvml_pids: set[int]) -> list:
        """HAMi-core frees an exited process's slot lazily, so its memory would stay at the
        high-water mark: drop a slot whose host pid NVML no longer lists and /proc lacks."""
        alive = self.pid_alive
        live = [p for p in region.procs
                if not p.hostpid or p.hostpid in nvml_pids or (alive is not None and alive(p.hostpid))]
        return devices if len(live) == len(region.procs) else aggregate(devices, live)

    def _slice(self, src: Sources, out: Draft, f: RegionFile, pod: PodInfo | None, dev, age: float | None) -> None:
        uid, container, uuid = f.pod_uid, f.container, dev.uuid
        grant = _grant_on(pod, container, uuid)
        on_gpu = src.owners.get(uuid, _NO_PROCESSES)
        # a slot's host pid counts unless its cgroup says it is another container's
        owner = on_gpu.owner
        claimed = {p for p in dev.hostpids if (o := owner.get(p)) is None or not o.foreign_to(uid, container)}
        out.hami_pids.update(claimed)
        mine = on_gpu.of(uid, container)
        nv = nvml_usage(src.gpus.get(uuid), claimed | mine if mine else claimed)
        used = dev.used_bytes
        out.slices.append(SliceReading(
            pod_uid=uid, container=container, gpu_uuid=uuid,
            pod=pod.name if pod else None, namespace=pod.namespace if pod else None,
            vdevice_index=dev.index, hami_memory_limit_bytes=dev.limit_bytes,
            hami_memory_used_bytes=used, hami_context_bytes=dev.context_bytes,
            hami_module_bytes=dev.module_bytes, hami_buffer_bytes=dev.buffer_bytes,
            sm_limit_ratio=dev.sm_limit_pct / 100 if dev.sm_limit_pct else None,
            sm_util_ratio=clamp01(larger(dev.sm_util_pct / 100, nv.sm_ratio)), last_kernel_age_s=age,
            process_count=larger(dev.processes, nv.processes), nvml_memory_used_bytes=nv.memory_bytes,
            alloc_memory_bytes=grant.mem_mib * MiB if grant else None,
            alloc_cores_ratio=grant_cores_ratio(grant),
            whole_gpu=bool(pod and container in pod.whole_gpus), source="hami",
        ))
        key = (uid, container, uuid)
        out.seen.add(key)
        out.disagreement[key] = self.tolerance.disagrees(used, nv.memory_bytes)


# MIG slices of a GPU whose count NVML did not give (A100 and H100 have 7)
DEFAULT_MIG_SLICES = 7


class MigStrategy:
    """MIG devices' slices from two grant sources: NVML's MIG devices with their processes
    placed by cgroup, and HAMi's dynamic MIG allocations (`hami.io/vgpu-mig-allocations`).
    Where the two disagree the slice is reported and flagged (`Draft.mig_disagreement`)."""

    name = "mig"

    def attribute(self, src: Sources, out: Draft) -> None:
        self._from_processes(src, out)
        self._from_allocations(src, out)

    def _from_allocations(self, src: Sources, out: Draft) -> None:
        for pod in src.pods.pods.values():
            for cname, allocations in pod.mig_allocations.items():
                if cname in pod.finished:
                    continue
                on_gpu: dict[str, list] = {}
                for a in allocations:
                    on_gpu.setdefault(a.gpu_uuid, []).append(a)
                for gpu_uuid, mine in on_gpu.items():
                    self._allocated_slice(src, out, pod, cname, gpu_uuid, mine)

    @staticmethod
    def _allocated_slice(src: Sources, out: Draft, pod: PodInfo, cname: str, gpu_uuid: str, mine: list) -> None:
        g = src.gpus.get(gpu_uuid)
        devices = {m.uuid: m for m in (g.mig or ())} if g is not None else {}
        problems, found = [], []
        if g is None and src.gpus:
            problems.append("GPU not on this node")
        elif g is not None and not g.mig:
            problems.append("GPU not in MIG mode")
        for a in mine:
            m = devices.get(a.mig_uuid) if a.mig_uuid else None
            if a.mig_uuid and m is None and g is not None and g.mig is not None:
                problems.append(f"{a.mig_uuid} not among NVML's MIG devices")
            if m is not None:
                found.append(m)
                if m.slices is not None and m.slices != a.compute_slices:
                    problems.append(f"{a.mig_uuid}: profile {a.profile}, NVML {m.slices} slices")
                if m.gpu_instance_id is not None and m.gpu_instance_id != a.gpu_instance_id:
                    problems.append(f"{a.mig_uuid}: GPU instance {a.gpu_instance_id}, NVML {m.gpu_instance_id}")
        key = (pod.uid, cname, gpu_uuid)
        seen_by_nvml = out.mig.get(key)
        if seen_by_nvml is not None and found and seen_by_nvml not in found:
            problems.append(f"its processes run on {seen_by_nvml.uuid}")
        if problems:
            out.mig_disagreement[key] = "; ".join(problems)
        if key in out.seen:
            return   # NVML's processes placed it already: one slice per container and GPU
        out.seen.add(key)
        if found:
            out.mig[key] = found[0]
        slices = (g.mig_slices if g is not None else None) or DEFAULT_MIG_SLICES
        share = min(1.0, sum(a.compute_slices for a in mine) / slices)
        total = g.memory_total if g is not None else None
        used = [m.memory_used for m in found]
        counts = [len(m.processes) if m.processes is not None else None for m in found]
        every = len(found) == len(mine)   # each instance read: its figures are the slice's
        out.slices.append(SliceReading(
            pod_uid=pod.uid, container=cname, gpu_uuid=gpu_uuid, pod=pod.name, namespace=pod.namespace,
            vdevice_index=0, process_count=sum(counts) if every and None not in counts else None,
            nvml_memory_used_bytes=sum(used) if every and None not in used else None,
            alloc_memory_bytes=int(share * total) if total else None, alloc_cores_ratio=share, whole_gpu=False,
            source="mig",
        ))

    @staticmethod
    def _from_processes(src: Sources, out: Draft) -> None:
        if src.owner_of is None:
            return
        for g in src.snapshot.gpus:
            if not g.mig or not g.mig_slices:
                continue
            for m in g.mig:
                owners: dict[tuple[str, str], list[int]] = {}
                pod_of: dict[str, PodInfo | None] = {}
                for pid in m.processes or ():
                    found = src.owner_of(pid, src.pods, None)
                    if found is not None:
                        pod_of[found.uid] = found.pod
                        owners.setdefault((found.uid, found.container), []).append(pid)
                # the instance's share on both axes, so every allocation policy bills slices / GPU slices
                share = min(1.0, m.slices / g.mig_slices) if m.slices else None
                mem_share = int(share * g.memory_total) if share is not None and g.memory_total else None
                for (uid, cname), pids in owners.items():
                    pod = pod_of[uid]
                    key = (uid, cname, g.uuid)
                    out.seen.add(key)
                    out.mig[key] = m
                    out.slices.append(SliceReading(
                        pod_uid=uid, container=cname, gpu_uuid=g.uuid, pod=pod.name if pod else None,
                        namespace=pod.namespace if pod else None, vdevice_index=0, process_count=len(pids),
                        nvml_memory_used_bytes=sum(m.processes[p] for p in pids),
                        alloc_memory_bytes=mem_share, alloc_cores_ratio=share, whole_gpu=False, source="mig",
                    ))


class AnnotationStrategy:
    name = "annotation"

    def __init__(self, tolerance: Tolerance):
        self.tolerance = tolerance

    def attribute(self, src: Sources, out: Draft) -> None:
        gpus = src.gpus
        for pod in src.pods.pods.values():
            for cname, grants in pod.grants.items():
                if cname in pod.finished:
                    continue   # an init container that completed holds its grant no more
                failed = out.hami_ok.get((pod.uid, cname)) is False or (pod.uid, cname) in out.hami_partial
                for vi, gr in enumerate(grants):
                    key = (pod.uid, cname, gr.uuid)
                    if key in out.seen or (gpus and gr.uuid not in gpus):
                        continue
                    out.seen.add(key)
                    used = None if failed else 0   # no region yet: nothing used; rejected: unknown
                    # no region is no proof of no use: NVML's figure for the container's processes
                    nv = nvml_usage(gpus.get(gr.uuid), src.owners.get(gr.uuid, _NO_PROCESSES).of(pod.uid, cname))
                    out.disagreement[key] = self.tolerance.disagrees(used, nv.memory_bytes)
                    out.slices.append(SliceReading(
                        pod_uid=pod.uid, container=cname, gpu_uuid=gr.uuid, pod=pod.name, namespace=pod.namespace,
                        vdevice_index=vi, hami_memory_limit_bytes=gr.mem_mib * MiB,
                        hami_memory_used_bytes=used, hami_context_bytes=used, hami_module_bytes=used,
                        hami_buffer_bytes=used, sm_limit_ratio=core_limit_ratio(gr.cores / 100),
                        sm_util_ratio=clamp01(larger(None if failed else 0.0, nv.sm_ratio)),
                        process_count=larger(None if failed else 0, nv.processes), nvml_memory_used_bytes=nv.memory_bytes,
                        alloc_memory_bytes=gr.mem_mib * MiB, alloc_cores_ratio=grant_cores_ratio(gr),
                        whole_gpu=cname in pod.whole_gpus, source="annotation",
                    ))


@dataclass(slots=True)
class _DraGroup:
    """One slice's rows of the allocation: its results of one claim on one device. Their
    shares by memory and by cores add up; the slice's share is the larger sum."""

    parts: list[DraSlice]
    gpu_uuid: str

    @property
    def mem_share(self) -> float | None:
        return _sum([p.mem_share for p in self.parts])

    @property
    def cores_share(self) -> float | None:
        return _sum([p.cores_share for p in self.parts])

    @property
    def share(self) -> float | None:
        return larger(self.mem_share, self.cores_share)


def _sum(values: list[Fraction | None]) -> float | None:
    return None if any(v is None for v in values) else float(min(Fraction(1), sum(values)))


class DraStrategy:
    name = "dra"

    def __init__(self, tolerance: Tolerance):
        self.tolerance = tolerance

    def attribute(self, src: Sources, out: Draft) -> None:
        if src.dra is None:
            return
        groups: dict[tuple[str, str, str, str], _DraGroup] = {}
        for d in src.dra.slices:
            gpu = src.dra.gpu_of.get((d.driver, d.pool, d.device)) or d.device_uuid or f"{d.driver}/{d.pool}/{d.device}"
            key = (d.pod_uid, d.container, d.claim_uid, gpu)
            if not d.billed:
                out.seen.add((d.pod_uid, d.container, gpu))   # its processes are monitoring, not a whole-GPU tenant
                continue
            groups.setdefault(key, _DraGroup([], gpu)).parts.append(d)
        regions = self._claim_regions(src, out)
        consumers: dict[tuple[str, str], list[tuple[str, str, float]]] = {}   # (claim uid, GPU) -> its slices
        for (uid, container, claim_uid, gpu), g in groups.items():
            consumers.setdefault((claim_uid, gpu), []).append((uid, container, g.share or 0.0))
        for (uid, container, claim_uid, gpu), g in groups.items():
            region = regions.get(claim_uid, _NO_REGION) if g.parts[0].driver == HAMI_DRIVER else None
            self._slice(src, out, g, region, consumers[(claim_uid, gpu)])

    @staticmethod
    def _claim_regions(src: Sources, out: Draft) -> dict[str, Region | None]:
        """Claim uid -> its region; None where it could not be read (its use is unknown)."""
        got: dict[str, Region | None] = {}
        for f, region in src.dra.claim_regions:
            if isinstance(region, RegionError):
                out.region_error(None, None, f"claims/{f.dir_name}", region)
                got[f.claim_uid] = None
            else:
                got[f.claim_uid] = region
        return got

    def _slice(self, src: Sources, out: Draft, g: _DraGroup, region: Region | object | None,
               consumers: list[tuple[str, str, float]]) -> None:
        d, gpu = g.parts[0], g.gpu_uuid
        uid, container = d.pod_uid, d.container
        sample = src.gpus.get(gpu)
        on_gpu = src.owners.get(gpu, _NO_PROCESSES)
        mine = on_gpu.of(uid, container)
        dev = next((v for v in region.devices if v.uuid == gpu), None) if isinstance(region, Region) else None
        used = sm = procs = None
        claimed: set[int] = set()
        if dev is not None:
            used, sm, procs, claimed = _claim_use(region, dev, on_gpu, uid, container, consumers)
            out.hami_pids.update(claimed)
        elif region is _NO_REGION:
            used, sm, procs = 0, 0.0, 0   # HAMi's claim without a region yet: nothing ran under HAMi-core
        nv = nvml_usage(sample, claimed | mine) if sample is not None else _NO_USAGE
        memory = sum(p.memory_bytes for p in g.parts) if all(p.memory_bytes is not None for p in g.parts) else None
        out.slices.append(SliceReading(
            pod_uid=uid, container=container, gpu_uuid=gpu, pod=d.pod, namespace=d.namespace,
            hami_memory_limit_bytes=dev.limit_bytes if dev is not None else None, hami_memory_used_bytes=used,
            sm_limit_ratio=dev.sm_limit_pct / 100 if dev is not None and dev.sm_limit_pct else None,
            sm_util_ratio=clamp01(larger(sm, nv.sm_ratio)), process_count=larger(procs, nv.processes),
            nvml_memory_used_bytes=nv.memory_bytes, alloc_memory_bytes=int(memory) if memory is not None else None,
            whole_gpu=False, source="dra", claim=d.claim, claim_uid=d.claim_uid, driver=d.driver,
            alloc_mem_share_ratio=g.mem_share, alloc_cores_share_ratio=g.cores_share,
        ))
        key = (uid, container, gpu)
        out.seen.add(key)
        if used is not None:
            out.disagreement[key] = self.tolerance.disagrees(used, nv.memory_bytes)


_NO_REGION = object()   # a HAMi claim with no region yet: nothing used


def _claim_use(region: Region, dev: DeviceView, on_gpu: GpuProcesses, uid: str, container: str,
               consumers: list[tuple[str, str, float]]) -> tuple[int, float, int | None, set[int]]:
    """The part of a claim's device use that is this container's: all of it when it is the
    claim's only consumer on the device; else its processes' slots, where NVML's pids place
    every slot in a consumer's cgroup; else the use split as the allocation is."""
    all_pids = {p.hostpid for p in region.procs if p.hostpid}
    if len(consumers) == 1:
        return dev.used_bytes, dev.sm_util_pct / 100, dev.processes, all_pids
    owner = {p.hostpid: on_gpu.owner.get(p.hostpid) for p in region.procs}
    members = {(u, c) for u, c, _ in consumers}
    if region.procs and all(o is not None and (o.uid, o.container) in members for o in owner.values()):
        mine = [p for p in region.procs if (owner[p.hostpid].uid, owner[p.hostpid].container) == (uid, container)]
        view = aggregate([dev], mine)[0]
        return view.used_bytes, view.sm_util_pct / 100, view.processes, {p.hostpid for p in mine}
    total = sum(w for _, _, w in consumers)
    weight = next(w for u, c, w in consumers if (u, c) == (uid, container))
    part = weight / total if total else 1 / len(consumers)
    return int(dev.used_bytes * part), dev.sm_util_pct / 100 * part, None, set()   # whose processes: unknown


class CgroupStrategy:
    name = "cgroup"

    def attribute(self, src: Sources, out: Draft) -> None:
        if src.owner_of is None:
            return
        for g in src.snapshot.gpus:
            if g.uuid not in src.owners:
                continue   # no processes, or a MIG GPU (its processes belong to its instances)
            owners: dict[tuple[str, str], list[int]] = {}
            for pid, found in src.owners[g.uuid].owner.items():
                if pid in out.hami_pids or found is None or found.pod is not None and found.pod.hami \
                        or (found.uid, found.container, g.uuid) in out.seen:
                    continue   # a region's, gone, a HAMi pod's (its slices come from HAMi/annotation) or DRA's
                owners.setdefault((found.uid, found.container), []).append(pid)
            for (uid, cname), pids in owners.items():
                pod = src.pods.pods.get(uid)
                own = [g.process_sm_util[p] for p in pids if g.process_sm_util and p in g.process_sm_util]
                if own:
                    sm = min(100.0, sum(own)) / 100
                elif len(owners) == 1 and g.util_gpu_pct is not None:
                    sm = g.util_gpu_pct / 100   # the only tenant of the GPU
                else:
                    sm = None
                out.slices.append(SliceReading(
                    pod_uid=uid, container=cname, gpu_uuid=g.uuid, pod=pod.name if pod else None,
                    namespace=pod.namespace if pod else None, sm_util_ratio=clamp01(sm), process_count=len(pids),
                    nvml_memory_used_bytes=sum(g.processes[p] for p in pids),
                    alloc_memory_bytes=g.memory_total, alloc_cores_ratio=1.0, whole_gpu=True, source="cgroup",
                ))


def _grant_on(pod: PodInfo | None, container: str, gpu_uuid: str) -> Grant | None:
    """The container's grant on that GPU (the first, as HAMi lists them), if any."""
    if pod is not None:
        for gr in pod.grants.get(container, ()):
            if gr.uuid == gpu_uuid:
                return gr
    return None
