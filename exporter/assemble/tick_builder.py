"""Sources -> one Tick: collect (NVML, HAMi regions, pods), attribute, assemble.

A Tick is built in three steps, each its own module:

1. collect: `NvmlReader` (exporter/sources/nvml.py) reads the GPUs and their processes, `PodCache`
   (exporter/sources/pods.py) holds the node's pod list and HAMi's grants, `RegionSource`
   (exporter/sources/hami.py) lists and reads HAMi-core's region files, `DraCache`
   (exporter/sources/dra_source.py) the node's ResourceClaims and ResourceSlices when DRA is
   read; each process is placed in its container through its cgroup (`ProcessOwners` here).
2. attribute: the strategies of exporter/assemble/attribution.py (region, MIG, annotation, DRA,
   cgroup) turn them into container slices.
3. assemble: GPU readings bounded to what is physically possible, with their slice counts; a
   DRA device NVML does not see is a GPU row of identity only (`dra_devices`).

/metrics and Kafka read only the finished `BuildResult`.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from slicemeter import clock
from slicemeter.exporter.assemble.attribution import (AnnotationStrategy, CgroupStrategy, DraInputs, DraStrategy, Draft,
                                                      GpuProcesses, MigStrategy, ProcOwner, RegionStrategy, Sources,
                                                      Strategy, Tolerance)
from slicemeter.exporter.sources.dra import HAMI_DRIVER, ResourceSlice, SplitPolicy, allocation_slices, device_model
from slicemeter.exporter.sources.device_health import DeviceReport, health_by_gpu
from slicemeter.exporter.sources.dra_source import DraCache
from slicemeter.exporter.sources.hami import (ClaimRegionFile, RegionError, RegionSource, discover_claims, parse_dir_name,
                                              read_claim_regions)
from slicemeter.exporter.sources.gpu_health import GpuHealth
from slicemeter.exporter.sources.nvml import GpuSample, MigSample, NvmlReader
from slicemeter.exporter.sources.pods import PodCache, PodIndex, PodInfo, pid_to_pod
from slicemeter.common import MiB
from slicemeter.exporter.assemble.shares import clamp01, larger
from slicemeter.tick import GpuReading, SliceReading, Tick

log = logging.getLogger(__name__)


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
    # (pod uid, container, parent GPU uuid) -> how HAMi's MIG allocation and NVML's MIG devices differ
    mig_disagreement: dict[tuple[str, str, str], str] = field(default_factory=dict)
    pods: PodIndex | None = None   # the pod list the Tick was attributed with (HAMi's grants)
    nvml_unsupported: frozenset[tuple[int | None, str]] = frozenset()   # (GPU index, call) NVML does not offer
    dra_errors: int = 0   # DRA refreshes failed and claims or devices refused since the last Tick
    # GPU uuid -> what NVML's health calls read, beyond the Tick's columns (Xid per code, remapped rows)
    gpu_health: dict[str, GpuHealth] = field(default_factory=dict)
    driver_version: str | None = None   # NVML's, for the families that label a GPU with it


class _AskedEachTick:
    """Values kept from one tick to the next while each tick asks for them again; a key the
    last tick did not ask for is forgotten (the pid exited)."""

    def __init__(self) -> None:
        self._this: dict = {}
        self._last: dict = {}

    def next_tick(self) -> None:
        self._last, self._this = self._this, {}

    def clear(self) -> None:
        self._this, self._last = {}, {}

    def get(self, key, make: Callable[..., object], *args):
        """The kept value of `key`, else make(*args): the arguments rather than a closure, so
        that the common case, a value kept, allocates nothing."""
        if key in self._this:
            return self._this[key]
        value = self._this[key] = self._last[key] if key in self._last else make(*args)
        return value


class ProcessOwners:
    """Host pid -> its container, through the pid's cgroup under the host /proc.

    A pid's cgroup is read when NVML first lists the pid and kept while each tick asks for it
    again: a process does not leave its container's cgroup, and re-reading every GPU
    process's cgroup each tick costs more than the rest of a busy node's Tick. Its owner
    (cgroup + pod list + GPU) is kept the same way while the pod list is the same one."""

    def __init__(self, proc_root: str):
        self.proc_root = proc_root
        self._cgroups = _AskedEachTick()   # pid -> (pod uid, container id) or None
        self._visible = _AskedEachTick()   # pid -> whether the host /proc shows it
        self._owners = _AskedEachTick()    # (pid, GPU) -> ProcOwner or None, in the pod list _owners_in
        self._owners_in: PodIndex | None = None

    def next_tick(self) -> None:
        """Forget the pids the last tick did not ask for."""
        self._cgroups.next_tick()
        self._visible.next_tick()
        self._owners.next_tick()

    def visible(self, pid: int) -> bool:
        """Whether `proc_root` shows the host pid: without the host's PID namespace (no
        `hostPID`) NVML's pids are not there, and no cgroup can place their memory."""
        return self._visible.get(pid, _proc_dir_exists, self.proc_root, pid)

    def owner(self, pid: int, pods: PodIndex, gpu_uuid: str | None = None) -> ProcOwner | None:
        """The container of a host pid; None: not a live pod's. `gpu_uuid`: the GPU it runs on,
        which names the container when only one of the pod's containers was granted that GPU
        (the pod's status may not list the container id yet)."""
        found = self._cgroups.get(pid, pid_to_pod, pid, self.proc_root)
        if pods is not self._owners_in:   # another pod list: every owner is found again
            self._owners.clear()
            self._owners_in = pods
        return self._owners.get((pid, gpu_uuid), _owner, found, pods, gpu_uuid)

    def on_gpus(self, gpus: list[GpuSample], pods: PodIndex) -> dict[str, GpuProcesses]:
        """The owner of every process NVML lists on a GPU outside MIG mode (MIG devices: MigStrategy)."""
        out: dict[str, GpuProcesses] = {}
        for g in gpus:
            if not g.processes or g.mig is not None:
                continue
            on_gpu = out[g.uuid] = GpuProcesses()
            for pid in g.processes:
                on_gpu.add(pid, self.owner(pid, pods, g.uuid))
        return out


def _proc_dir_exists(proc_root: str, pid: int) -> bool:
    return os.path.isdir(os.path.join(proc_root, str(int(pid))))


def _owner(found: tuple[str, str | None] | None, pods: PodIndex, gpu_uuid: str | None) -> ProcOwner | None:
    """The container of a process in cgroup `found` (pod uid, container id)."""
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
        dra: DraCache | None = None,
        dra_split: SplitPolicy = SplitPolicy.EQUAL,
    ):
        self.node, self.cluster, self.nvml, self.hami_dir, self.pods = node, cluster, nvml, hami_dir, pods
        self.dra, self.dra_split = dra, dra_split
        if dra is not None:
            pods.dra_pods = True   # the pods' claims come from the same pod list
        self.regions = RegionSource(hami_dir)
        self.processes = ProcessOwners(proc_root) if proc_root is not None else None
        tolerance = self.tolerance = Tolerance(tolerance_bytes, tolerance_ratio)
        self.strategies: list[Strategy] = [RegionStrategy(tolerance, pid_alive), MigStrategy(),
                                           AnnotationStrategy(tolerance), DraStrategy(tolerance), CgroupStrategy()]
        self._logged: set[tuple[str, str]] = set()
        self._pod_errors_seen = 0
        self._dra_errors_seen = 0

    def build(self, ts_ms: int | None = None, interval_ms: int = 10_000) -> BuildResult:
        t0 = time.perf_counter()
        ts_ms = clock.now_ms() if ts_ms is None else ts_ms
        snap = self.nvml.read()
        pods = self.pods.get()
        res = BuildResult(tick=Tick(node=self.node, cluster=self.cluster, ts_ms=ts_ms, interval_ms=interval_ms),
                          duration_s=0.0, nvml_errors=snap.errors, pods=pods,
                          nvml_unsupported=frozenset(self.nvml.unsupported), driver_version=snap.driver)
        pod_err_total = self.pods.errors_total
        res.pod_errors, self._pod_errors_seen = pod_err_total - self._pod_errors_seen, pod_err_total
        if self.dra is not None:
            dra_err_total = self.dra.errors_total
            res.dra_errors, self._dra_errors_seen = dra_err_total - self._dra_errors_seen, dra_err_total

        src = self._collect(res, snap, pods, ts_ms)
        draft = Draft(slices=res.tick.slices, region_error=lambda *a: self._region_error(res, *a), hami_ok=res.hami_ok,
                      hami_partial=res.hami_partial, disagreement=res.disagreement, mig=res.mig,
                      mig_disagreement=res.mig_disagreement)
        for strategy in self.strategies:
            strategy.attribute(src, draft)
        self._mark_verified(res.tick.slices, snap.gpus, draft.hami_pids)
        for key, what in res.mig_disagreement.items():
            if (key, what) not in self._logged:   # once per slice and difference
                self._logged.add((key, what))
                log.warning("pod %s container %s on %s: HAMi's MIG allocation and NVML disagree: %s", *key, what)

        counts: dict[str, int] = {}
        for s in res.tick.slices:
            counts[s.gpu_uuid] = counts.get(s.gpu_uuid, 0) + 1
        published = src.dra.gpus if src.dra is not None else {}
        for g in snap.gpus:
            reading = _gpu_reading(g, counts.get(g.uuid, 0))
            reading.driver = published[g.uuid].driver if g.uuid in published else None
            res.tick.gpus.append(reading)
            res.gpu_health[g.uuid] = g.health
        for uuid, row in published.items():
            if uuid not in src.gpus:
                row.slice_count = counts.get(uuid, 0)
                res.tick.gpus.append(row)
        _mark_device_health(res.tick.gpus, snap.gpus, pods, src.dra)
        res.duration_s = time.perf_counter() - t0
        return res

    def _collect(self, res: BuildResult, snap, pods: PodIndex, ts_ms: int) -> Sources:
        owners: dict[str, GpuProcesses] = {}
        if self.processes is not None:
            self.processes.next_tick()
            owners = self.processes.on_gpus(snap.gpus, pods)
        files, dir_errors = self.regions.scan()
        for entry, err in dir_errors:
            self._dir_error(res, pods, entry, err)
        listed = []
        for f in files:
            pod = pods.pods.get(f.pod_uid)
            if pods.fetched and pod is None:
                continue   # stale directory of a deleted pod
            if pod is not None and f.container in pod.finished:
                continue   # a completed init container's region stays behind; nothing runs there
            listed.append(f)
        devmem = {g.uuid: g.memory_total for g in snap.gpus if g.memory_total}
        regions = self.regions.read(listed, devmem, ts_ms / 1000)
        return Sources(ts_ms=ts_ms, snapshot=snap, pods=pods, owners=owners, regions=regions,
                       owner_of=self.processes.owner if self.processes is not None else None,
                       dra=self._dra_inputs(res, pods, devmem, ts_ms))

    def _dra_inputs(self, res: BuildResult, pods: PodIndex, devmem: dict[str, int], ts_ms: int) -> DraInputs | None:
        """The node's DRA slices and its HAMi claims' regions; None until claims, slices and
        pods have each been read once (DRA slices are unknown then, not none)."""
        if self.dra is None:
            return None
        got = self.dra.get()
        if not got.fetched or not pods.fetched:
            return None
        slices = allocation_slices(got.claims, got.slices, pods.dra_pods, self.dra_split)
        hami_claims = {d.claim_uid for d in slices if d.driver == HAMI_DRIVER}
        files, errors = discover_claims(self.hami_dir)
        regions = read_claim_regions(self.hami_dir, [f for f in files if f.claim_uid in hami_claims], devmem, ts_ms / 1000)
        for entry, err in errors:
            if entry in hami_claims:   # the claim's directory could not be read: its use is unknown
                regions.append((ClaimRegionFile(entry, entry, "", ""), err))
            else:   # a stray name costs only itself
                self._region_error(res, None, None, f"claims/{entry}", err)
        devices = dra_devices(got.slices)
        gpus: dict[str, GpuReading] = {}
        for row in devices.values():
            gpus.setdefault(row.gpu_uuid, row)   # one row per GPU however many partitions it has
        return DraInputs(slices, {key: row.gpu_uuid for key, row in devices.items()}, regions, gpus, got.claims)

    def _mark_verified(self, slices: list[SliceReading], gpus: list[GpuSample], region_pids: set[int]) -> None:
        """Each slice's `usage_verified`: NVML's and the cgroups' own figures (cgroup and MIG
        slices) are; a region's or a grant's only where each of NVML's processes on its GPU is
        placed, by its cgroup or by a region's slot naming its host pid (`usage_checkable`)."""
        on_gpu: dict[str, list[SliceReading]] = {}
        for s in slices:
            on_gpu.setdefault(s.gpu_uuid, []).append(s)
        visible = self.processes.visible if self.processes is not None else None
        for g in gpus:
            mine = on_gpu.get(g.uuid, ())
            if not mine:
                continue
            pids = g.processes or {}
            hidden = sum(p not in region_pids and (visible is None or not visible(p)) for p in pids)
            claimed = sum(larger(s.hami_memory_used_bytes, s.nvml_memory_used_bytes) or 0 for s in mine)
            attributed = any(s.nvml_memory_used_bytes for s in mine)
            checkable = usage_checkable(g.processes is not None, hidden, attributed, g.memory_used, claimed,
                                        g.memory_total, self.tolerance)
            for s in mine:
                s.usage_verified = True if s.source in _NVML_SOURCES else checkable

    def _dir_error(self, res: BuildResult, pods: PodIndex, entry: str, err: RegionError) -> None:
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


def _mark_device_health(rows: list[GpuReading], gpus: list[GpuSample], pods: PodIndex, dra: DraInputs | None) -> None:
    """Each GPU row's `device_health`: the worst the kubelet reports for its device in any
    pod's status, or a DRA driver in its claim's device conditions
    (exporter/sources/device_health.py); null where none does."""
    reports = [r for p in pods.pods.values() if p.device_health for r in p.device_health]
    reports += [DeviceReport(f"claim:{c.name}", f"{driver}/{pool}/{device}", code)
                for c in (dra.claims if dra is not None else ()) for driver, pool, device, code in c.device_health]
    if not reports:
        return
    by_uuid = {row.gpu_uuid: row for row in rows}
    mig_parent = {m.uuid: g.uuid for g in gpus for m in g.mig or ()}
    for uuid, code in health_by_gpu(reports, by_uuid, mig_parent, dra.gpu_of if dra is not None else {}).items():
        by_uuid[uuid].device_health = code


_NVML_SOURCES = frozenset({"cgroup", "mig"})   # slices whose every figure is NVML's, through cgroups


def usage_checkable(listed: bool, hidden: int, attributed: bool, memory_used: int | None, claimed: int,
                    memory_total: int | None, tolerance: Tolerance) -> bool:
    """Whether the usage HAMi's slices on a GPU report could be checked against NVML.

    `listed`: NVML listed the GPU's processes; `hidden`: how many of them neither the host
    /proc (their cgroup) nor a region slot (their host pid) places; `attributed`: some slice got NVML memory of
    its own processes; `claimed`: the slices' memory (the larger of HAMi's and NVML's each).
    An empty process list while the GPU's memory stands far above what its slices claim (more
    than the tolerance, and at least its ratio of the GPU) is also unchecked: NVML inside a
    container without the host's PID namespace may list no process at all."""
    if not listed or hidden:
        return False
    if attributed or memory_used is None:
        return True
    slack = max(tolerance.bytes, tolerance.ratio * (memory_total or 0))
    return memory_used - claimed <= slack


def _gpu_reading(g: GpuSample, slice_count: int) -> GpuReading:
    """NVML values bounded to what is physically possible (a driver glitch is not a reading)."""
    used = g.memory_used
    if used is not None and (used < 0 or (g.memory_total and used > g.memory_total)):
        used = None
    return GpuReading(
        gpu_uuid=g.uuid, gpu_index=g.index, model=g.name, memory_total_bytes=g.memory_total, memory_used_bytes=used,
        sm_util_ratio=clamp01(g.util_gpu_pct / 100) if g.util_gpu_pct is not None else None,
        mem_util_ratio=clamp01(g.util_mem_pct / 100) if g.util_mem_pct is not None else None,
        power_watts=g.power_w if g.power_w is not None and 0 <= g.power_w < 5000 else None,
        energy_joules=g.energy_j if g.energy_j is not None and g.energy_j >= 0 else None,
        slice_count=slice_count,
        **_health_columns(g.health, g.lost),
    )


def _memory(amount) -> int | None:
    return int(amount) if amount is not None else None


def dra_devices(slices: tuple[ResourceSlice, ...] | list[ResourceSlice]) -> dict[tuple[str, str, str], GpuReading]:
    """(driver, pool, device) -> the GPU row it is metered on: the device's `uuid` attribute,
    a partition's `parentUUID` (its share is of the parent), else `<driver>/<pool>/<device>`.
    Identity only: model, memory (a partition's: its counter set's `memory`), driver."""
    out: dict[tuple[str, str, str], GpuReading] = {}
    for s in slices:
        for d in s.devices:
            uuid, parent = d.attributes.get("uuid"), d.attributes.get("parentUUID")
            memory = d.capacity.get("memory")
            if isinstance(parent, str) and d.consumes_counters and not isinstance(uuid, str):
                uuid = parent
                memory = next((c.get("memory") for name in d.consumes_counters
                               if (c := _counter_set(slices, s, name)) is not None), None)
            if not isinstance(uuid, str):
                uuid = f"{s.driver}/{s.pool}/{d.name}"
            out[(s.driver, s.pool, d.name)] = GpuReading(gpu_uuid=uuid, gpu_index=-1, model=device_model(d),
                                                         memory_total_bytes=_memory(memory), driver=s.driver)
    return out


def _counter_set(slices, owner: ResourceSlice, name: str) -> dict | None:
    """A counter set published in another slice of the same pool (from Kubernetes 1.35)."""
    return next((s.shared_counters[name] for s in slices
                 if (s.driver, s.pool) == (owner.driver, owner.pool) and name in s.shared_counters), None)


def _health_columns(h: GpuHealth, lost: bool) -> dict:
    """The Tick's health columns of one GPU (docs/health.md); a lost GPU has only `gpu_lost`
    and the Xid events that came with it."""
    xids = {"xid_events": h.xid_events, "xid_last_code": h.xid_last_code, "xid_critical_code": h.xid_critical_code}
    if lost:
        return {"gpu_lost": True, **xids}
    ecc = {f"ecc_{kind}_{counter}": h.ecc.get((kind, counter))
           for kind in ("corrected", "uncorrected") for counter in ("volatile", "aggregate")}
    return {
        "temperature_celsius": h.temperature_c, "memory_temperature_celsius": h.memory_temperature_c,
        "fan_speed_ratio": h.fan_speed_pct / 100 if h.fan_speed_pct is not None and h.fan_speed_pct >= 0 else None,
        **ecc, "retired_pages_pending": h.retired_pages_pending, "remapped_rows_pending": h.remapped_rows_pending,
        "remapped_rows_failed": h.remapped_rows_failed, "pcie_replay_total": h.pcie_replays,
        "clock_event_reasons": h.clock_event_reasons, "power_violation_seconds_total": h.power_violation_s,
        "thermal_violation_seconds_total": h.thermal_violation_s, "gpu_lost": False, **xids,
    }
