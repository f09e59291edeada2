"""NVML readings through an injected pynvml-compatible module.

The real `pynvml` (nvidia-ml-py) on a node, the simulator's fake in tests and demos. Every
call is guarded on its own: one failing call (or one failing GPU) costs that value only,
never the rest of the node's Tick.

Errors are told apart by their NVML return code (`NVMLError.value`), never by class name:
pynvml generates one subclass per code, and names such as NVMLError_FunctionNotFound,
NVMLError_GpuNotFound and NVMLError_LibraryNotFound share a suffix with NotFound while
meaning something else entirely.

- NOT_FOUND from nvmlDeviceGetProcessUtilization: no samples since the last read (no
  process ran a kernel), an empty reading, not an error.
- NOT_SUPPORTED / FUNCTION_NOT_FOUND (and a module without the function): permanent for
  that GPU and call; counted once, then the call is no longer made for that GPU.
- GPU_IS_LOST: the GPU fell off the bus; counted, its other calls are not made, and it is
  reported as lost (`GpuSample.lost`, no figures) when its UUID is known from this read or
  an earlier one.
- anything else: counted as an error, the value is unknown.

A GPU in MIG mode is read through its MIG devices (each a GPU instance with its own
memory and processes); its utilization counters are not available in that mode (NVML
answers NOT_SUPPORTED), so they are not asked for.

Health (exporter/sources/gpu_health.py, docs/health.md): temperatures, fan, ECC, retired
pages and remapped rows, PCIe replays, clock-event reasons, violation time, each its own
figure under the same rules; the NVML 13 entry points first, the deprecated ones when a
driver lacks them. Xid events come through one event set drained each read, a bounded
number of waits at a time.
"""
from __future__ import annotations

import ctypes
import logging
import math
from dataclasses import dataclass, field
from typing import Any

from slicemeter.exporter.sources import gpu_health as gh

log = logging.getLogger(__name__)

# NVML return codes (nvml.h; pynvml's NVML_ERROR_* constants): a stable ABI.
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_DEVICE_MIG_ENABLE = 1
_PERMANENT = frozenset({NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND})
_MISSING = object()   # a call that was not made (remembered as unsupported, or the GPU is lost)


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no library, no driver)."""


class _GpuLost(Exception):
    pass


def nvml_code(exc: BaseException) -> int | None:
    """The NVML return code an exception carries (pynvml's NVMLError.value), else None."""
    value = getattr(exc, "value", None)
    return value if type(value) is int else None


@dataclass(slots=True)
class MigSample:
    """One MIG device (a GPU instance and its compute instance) of a GPU in MIG mode."""

    index: int                     # nvmlDeviceGetMigDeviceHandleByIndex index
    uuid: str
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    slices: int | None = None       # gpuInstanceSliceCount
    memory_size_mb: int | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    processes: dict[int, int] | None = None

    @property
    def profile(self) -> str | None:
        """NVIDIA's profile name, e.g. 1g.10gb: slices and memory rounded up to whole GB."""
        if self.slices is None or self.memory_size_mb is None:
            return None
        return f"{self.slices}g.{math.ceil(self.memory_size_mb / 1024)}gb"


@dataclass(slots=True)
class GpuSample:
    index: int
    uuid: str
    name: str | None = None
    memory_total: int | None = None
    memory_used: int | None = None
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    # pid -> used GPU memory bytes; None when the call failed (unknown, not empty)
    processes: dict[int, int] | None = None
    # pid -> SM utilization percent over the last sample window; None when unknown
    process_sm_util: dict[int, float] | None = None
    # MIG mode: the GPU's slices (nvmlDeviceGetMaxMigDeviceCount) and its MIG devices; None: not in MIG mode
    mig_slices: int | None = None
    mig: list[MigSample] | None = None
    health: gh.GpuHealth = field(default_factory=gh.GpuHealth)
    lost: bool = False              # NVML answered GPU_IS_LOST: no figures this read


@dataclass(slots=True)
class NvmlSnapshot:
    gpus: list[GpuSample] = field(default_factory=list)
    errors: int = 0
    driver: str | None = None


def load_pynvml() -> Any:
    """The real pynvml, initialised; NvmlUnavailable with the reason if this machine has no NVML."""
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError as exc:
        raise NvmlUnavailable(f"the pynvml package is not installed ({exc})") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise NvmlUnavailable(
            f"NVML could not be initialised ({exc}); is the NVIDIA driver installed and libnvidia-ml.so visible? "
            "Use --simulate FILE --node NAME to run without a GPU."
        ) from None
    return pynvml


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


class NvmlReader:
    """Reads every GPU of the node through `nvml` (a module with pynvml's functions)."""

    def __init__(self, nvml: Any, initialised: bool = False):
        self.nvml = nvml
        self._initialised = initialised
        self._last_seen_us: dict[int, int] = {}
        # (GPU index or None for node-level calls, function or figure): answered NOT_SUPPORTED / FUNCTION_NOT_FOUND
        self.unsupported: set[tuple[int | None, str]] = set()
        self._uuids: dict[int, str] = {}            # GPU index -> UUID, kept to report a GPU once it is lost
        self._event_set: Any = None                 # the Xid event set; False: NVML offers none
        self._xid_handles: dict[Any, int] = {}      # registered device handle (its address) -> GPU index
        self._xids: dict[int, gh.XidTally] = {}
        self._lacking: list[tuple[int | None, str]] = []   # found unsupported since the last log line

    def _call(self, snap: NvmlSnapshot, gpu: int | None, fn: str, *args: Any, not_found: Any = _MISSING,
              optional: bool = False, figure: str | None = None) -> Any:
        """fn(*args), or None when it failed; `not_found` is returned for NVML_ERROR_NOT_FOUND when given.
        `optional`: NOT_SUPPORTED is an answer (e.g. no MIG on this GPU), not an error.
        `figure`: the name a NOT_SUPPORTED answer is remembered by, where one call reads several figures.
        Raises _GpuLost when NVML says the GPU is gone."""
        key = (gpu, figure or fn)
        if key in self.unsupported:
            return None
        call = getattr(self.nvml, fn, None)
        if call is None:
            code: int | None = NVML_ERROR_FUNCTION_NOT_FOUND   # a binding without the call
        else:
            try:
                return call(*args)
            except Exception as exc:  # NVMLError subclasses (and anything a binding may raise)
                code = nvml_code(exc)
        if code == NVML_ERROR_NOT_FOUND and not_found is not _MISSING:
            return not_found
        if code in _PERMANENT:
            self.unsupported.add(key)
            if optional:
                return None
            snap.errors += 1
            self._lacking.append(key)
            return None
        snap.errors += 1
        if code == NVML_ERROR_GPU_IS_LOST:
            log.warning("NVML %s: GPU %s is lost", fn, gpu)
            raise _GpuLost()
        log.debug("NVML %s on GPU %s failed (code %s)", fn, gpu, code)
        return None

    def read(self) -> NvmlSnapshot:
        snap = NvmlSnapshot()
        if not self._initialised:
            self._call(snap, None, "nvmlInit")
            if snap.errors:
                return snap
            self._initialised = True
        drv = self._call(snap, None, "nvmlSystemGetDriverVersion")
        snap.driver = _text(drv) if drv is not None else None
        count = self._call(snap, None, "nvmlDeviceGetCount")
        for i in range(int(count or 0)):
            try:
                g = self._read_gpu(snap, i)
            except _GpuLost:
                g = GpuSample(index=i, uuid=self._uuids[i], lost=True) if i in self._uuids else None
            if g is not None:
                snap.gpus.append(g)
        self._drain_xids(snap)
        for g in snap.gpus:
            tally = self._xids.get(g.index)
            if tally is not None:
                h = g.health
                h.xid_events, h.xid_last_code, h.xid_critical_code = tally.take()
                h.xid_totals, h.xid_last_ever = dict(tally.totals), tally.last
        self._log_lacking(snap)
        return snap

    def _log_lacking(self, snap: NvmlSnapshot) -> None:
        """One line for the calls the boards turned out to lack in this read (on the first read,
        all of them; later, only a call first made then): boards lacking the same calls share
        their part of it. A node of eight H100s without a fan is one line, not eight times nine."""
        if not self._lacking:
            return
        calls: dict[int | None, list[str]] = {}
        for gpu, name in self._lacking:
            calls.setdefault(gpu, []).append(name)
        self._lacking.clear()
        models = {g.index: g.name for g in snap.gpus}
        boards: dict[tuple[str | None, tuple[str, ...]], list[int | None]] = {}
        for gpu in sorted(calls, key=lambda g: -1 if g is None else g):
            boards.setdefault((models.get(gpu) if gpu is not None else None, tuple(calls[gpu])), []).append(gpu)
        log.info("NVML calls these boards lack (not asked again): %s", "; ".join(
            _board_text(gpus, model) + ": " + ", ".join(names) for (model, names), gpus in boards.items()))

    def _read_gpu(self, snap: NvmlSnapshot, i: int) -> GpuSample | None:
        handle = self._call(snap, i, "nvmlDeviceGetHandleByIndex", i)
        if handle is None:
            return None
        uuid = self._call(snap, i, "nvmlDeviceGetUUID", handle)
        if uuid is None:
            return None   # without its identity a GPU's numbers cannot be attributed
        g = GpuSample(index=i, uuid=_text(uuid))
        self._uuids[i] = g.uuid
        name = self._call(snap, i, "nvmlDeviceGetName", handle)
        g.name = _text(name) if name is not None else None
        g.memory_total, g.memory_used = self._memory(snap, i, handle)
        power = self._call(snap, i, "nvmlDeviceGetPowerUsage", handle)      # mW
        g.power_w = power / 1000.0 if power is not None else None
        energy = self._call(snap, i, "nvmlDeviceGetTotalEnergyConsumption", handle)   # mJ
        g.energy_j = energy / 1000.0 if energy is not None else None
        self._read_health(snap, i, handle, g.health)
        self._register_xids(snap, i, handle)
        mode = self._call(snap, i, "nvmlDeviceGetMigMode", handle, optional=True)   # [current, pending]
        if mode is not None and int(mode[0]) == NVML_DEVICE_MIG_ENABLE:
            self._read_mig(snap, g, handle)
            return g
        util = self._call(snap, i, "nvmlDeviceGetUtilizationRates", handle)
        if util is not None:
            g.util_gpu_pct, g.util_mem_pct = float(util.gpu), float(util.memory)
        g.processes = self._processes(snap, i, handle)
        g.process_sm_util = self._process_util(snap, handle, i)
        return g

    def _first(self, snap: NvmlSnapshot, i: int, calls: tuple[str, str], *args: Any) -> Any:
        """The NVML 13 entry point, or the deprecated one where the driver or binding lacks it."""
        new, old = calls
        value = self._call(snap, i, new, *args, optional=True)
        return value if value is not None or (i, new) not in self.unsupported else self._call(snap, i, old, *args)

    def _read_health(self, snap: NvmlSnapshot, i: int, handle: Any, h: gh.GpuHealth) -> None:
        temp = self._first(snap, i, ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), handle, gh.TEMPERATURE_GPU)
        h.temperature_c = float(temp) if temp is not None else None
        h.memory_temperature_c = self._field(snap, i, handle, gh.FI_DEV_MEMORY_TEMP, "memory_temperature")
        fan = self._call(snap, i, "nvmlDeviceGetFanSpeed", handle)            # percent of the fan's maximum
        h.fan_speed_pct = float(fan) if fan is not None else None
        for etype, ename in ((gh.ECC_CORRECTED, "corrected"), (gh.ECC_UNCORRECTED, "uncorrected")):
            for ctype, cname in ((gh.ECC_VOLATILE, "volatile"), (gh.ECC_AGGREGATE, "aggregate")):
                n = self._call(snap, i, "nvmlDeviceGetTotalEccErrors", handle, etype, ctype,
                               figure=f"nvmlDeviceGetTotalEccErrors/{ename}/{cname}")
                if n is not None:
                    h.ecc[(ename, cname)] = int(n)
        pending = self._call(snap, i, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
        h.retired_pages_pending = bool(pending) if pending is not None else None
        rows = self._call(snap, i, "nvmlDeviceGetRemappedRows", handle)      # (corr, unc, pending, failure)
        if rows is not None:
            h.remapped_rows = (int(rows[0]), int(rows[1]))
            h.remapped_rows_pending, h.remapped_rows_failed = bool(rows[2]), bool(rows[3])
        replays = self._call(snap, i, "nvmlDeviceGetPcieReplayCounter", handle)
        h.pcie_replays = int(replays) if replays is not None else None
        reasons = self._first(snap, i, ("nvmlDeviceGetCurrentClocksEventReasons",
                                        "nvmlDeviceGetCurrentClocksThrottleReasons"), handle)
        h.clock_event_reasons = int(reasons) if reasons is not None else None
        for policy, name in ((gh.PERF_POLICY_POWER, "power"), (gh.PERF_POLICY_THERMAL, "thermal")):
            v = self._call(snap, i, "nvmlDeviceGetViolationStatus", handle, policy,
                           figure=f"nvmlDeviceGetViolationStatus/{name}")
            seconds = int(v.violationTime) / 1e9 if v is not None else None     # ns since the driver loaded
            setattr(h, f"{name}_violation_s", seconds)

    def _field(self, snap: NvmlSnapshot, i: int, handle: Any, field_id: int, figure: str) -> float | None:
        """One field value; a field the board does not offer is remembered as unsupported, like a call."""
        key = f"nvmlDeviceGetFieldValues/{figure}"
        values = self._call(snap, i, "nvmlDeviceGetFieldValues", handle, [field_id], figure=key)
        if values is None:
            return None
        v = values[0]
        code = int(v.nvmlReturn)
        if code in _PERMANENT:
            self.unsupported.add((i, key))
            snap.errors += 1
            self._lacking.append((i, key))
            return None
        if code == NVML_ERROR_GPU_IS_LOST:
            snap.errors += 1
            raise _GpuLost()
        value = gh.field_value(v)
        if value is None:
            snap.errors += 1
        return float(value) if value is not None else None

    # -- Xid events: one event set for the node, each GPU registered once
    def _register_xids(self, snap: NvmlSnapshot, i: int, handle: Any) -> None:
        if self._event_set is None:
            created = self._call(snap, None, "nvmlEventSetCreate")
            self._event_set = created if created is not None else False
        if self._event_set is False or i in self._xids or (i, "nvmlDeviceRegisterEvents") in self.unsupported:
            return
        errors = snap.errors
        self._call(snap, i, "nvmlDeviceRegisterEvents", handle, gh.EVENT_XID_CRITICAL, self._event_set)
        if snap.errors == errors and (i, "nvmlDeviceRegisterEvents") not in self.unsupported:
            self._xid_handles[_handle_key(handle)] = i
            self._xids[i] = gh.XidTally()

    def _drain_xids(self, snap: NvmlSnapshot) -> None:
        """Every queued Xid event, at most MAX_XID_WAITS_PER_TICK of them (the rest wait for the next read)."""
        if not self._xids:
            return
        wait = getattr(self.nvml, "nvmlEventSetWait_v2", None) or getattr(self.nvml, "nvmlEventSetWait")
        for _ in range(gh.MAX_XID_WAITS_PER_TICK):
            try:
                data = wait(self._event_set, 0)
            except Exception as exc:
                if nvml_code(exc) != gh.NVML_ERROR_TIMEOUT:   # TIMEOUT: the queue is empty
                    snap.errors += 1
                    log.debug("NVML nvmlEventSetWait failed (code %s)", nvml_code(exc))
                return
            i = self._xid_handles.get(_handle_key(data.device))
            if i is not None and int(data.eventType) & gh.EVENT_XID_CRITICAL:
                self._xids[i].add(int(data.eventData))

    def _memory(self, snap: NvmlSnapshot, i: int, handle: Any) -> tuple[int | None, int | None]:
        mem = self._call(snap, i, "nvmlDeviceGetMemoryInfo", handle)
        return (int(mem.total), int(mem.used)) if mem is not None else (None, None)

    def _processes(self, snap: NvmlSnapshot, i: int, handle: Any) -> dict[int, int] | None:
        """pid -> used bytes of the compute processes; None when the list could not be read."""
        procs = self._call(snap, i, "nvmlDeviceGetComputeRunningProcesses", handle)
        if procs is None:
            return None
        out: dict[int, int] = {}
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out[int(p.pid)] = int(used) if isinstance(used, int) and used >= 0 else 0
        return out

    def _read_mig(self, snap: NvmlSnapshot, g: GpuSample, handle: Any) -> None:
        i = g.index
        slots = self._call(snap, i, "nvmlDeviceGetMaxMigDeviceCount", handle)
        g.mig_slices = int(slots) if slots else None
        g.mig = []
        every_list_read = True
        for j in range(int(slots or 0)):
            # NOT_FOUND: no MIG device at this index (fewer instances than slots)
            mh = self._call(snap, i, "nvmlDeviceGetMigDeviceHandleByIndex", handle, j, not_found=None)
            if mh is None:
                continue
            uuid = self._call(snap, i, "nvmlDeviceGetUUID", mh)
            if uuid is None:
                continue
            m = MigSample(index=j, uuid=_text(uuid))
            m.gpu_instance_id = self._call(snap, i, "nvmlDeviceGetGpuInstanceId", mh)
            m.compute_instance_id = self._call(snap, i, "nvmlDeviceGetComputeInstanceId", mh)
            attrs = self._call(snap, i, "nvmlDeviceGetAttributes", mh)
            if attrs is not None:
                m.slices, m.memory_size_mb = int(attrs.gpuInstanceSliceCount), int(attrs.memorySizeMB)
            m.memory_total, m.memory_used = self._memory(snap, i, mh)
            m.processes = self._processes(snap, i, mh)
            every_list_read = every_list_read and m.processes is not None
            g.mig.append(m)
        # the GPU's processes are its instances' (when every list was read: else unknown)
        if every_list_read:
            g.processes = {pid: used for m in g.mig for pid, used in (m.processes or {}).items()}

    def _process_util(self, snap: NvmlSnapshot, handle: Any, index: int) -> dict[int, float] | None:
        since = self._last_seen_us.get(index, 0)
        samples = self._call(snap, index, "nvmlDeviceGetProcessUtilization", handle, since, not_found=())
        if samples is None:
            return None
        # Several samples per process in the window: each is a percentage, so average them.
        acc: dict[int, list[float]] = {}
        for s in samples:
            ts = int(getattr(s, "timeStamp", 0))
            self._last_seen_us[index] = max(self._last_seen_us.get(index, 0), ts)
            acc.setdefault(int(s.pid), []).append(min(100.0, max(0.0, float(s.smUtil))))
        return {pid: sum(v) / len(v) for pid, v in acc.items()}

    def shutdown(self) -> None:
        if self._event_set:
            try:
                self.nvml.nvmlEventSetFree(self._event_set)
            except Exception:
                pass
            self._event_set = None
        if self._initialised:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass
            self._initialised = False


def _board_text(gpus: list[int | None], model: str | None) -> str:
    if gpus == [None]:
        return "node"
    text = "GPU " + ",".join(str(g) for g in gpus)
    return f"{text} ({model})" if model else text


def _handle_key(handle: Any) -> Any:
    """A device handle as a dict key: pynvml's are ctypes pointers (new objects each call, the
    same address), a fake's are values."""
    if isinstance(handle, ctypes._Pointer):
        return ctypes.cast(handle, ctypes.c_void_p).value
    return handle
