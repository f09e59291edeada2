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
- GPU_IS_LOST: the GPU fell off the bus; counted, and the GPU is left out of this read
  (its other calls are not made).
- anything else: counted as an error, the value is unknown.

A GPU in MIG mode is read through its MIG devices (each a GPU instance with its own
memory and processes); its utilization counters are not available in that mode (NVML
answers NOT_SUPPORTED), so they are not asked for.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

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
        # (GPU index or None for node-level calls, function): answered NOT_SUPPORTED / FUNCTION_NOT_FOUND
        self.unsupported: set[tuple[int | None, str]] = set()

    def _call(self, snap: NvmlSnapshot, gpu: int | None, fn: str, *args: Any, not_found: Any = _MISSING,
              optional: bool = False) -> Any:
        """fn(*args), or None when it failed; `not_found` is returned for NVML_ERROR_NOT_FOUND when given.
        `optional`: NOT_SUPPORTED is an answer (e.g. no MIG on this GPU), not an error.
        Raises _GpuLost when NVML says the GPU is gone."""
        key = (gpu, fn)
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
            log.info("NVML %s on GPU %s is not supported (code %s); not asked again", fn, gpu, code)
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
                continue
            if g is not None:
                snap.gpus.append(g)
        return snap

    def _read_gpu(self, snap: NvmlSnapshot, i: int) -> GpuSample | None:
        handle = self._call(snap, i, "nvmlDeviceGetHandleByIndex", i)
        if handle is None:
            return None
        uuid = self._call(snap, i, "nvmlDeviceGetUUID", handle)
        if uuid is None:
            return None   # without its identity a GPU's numbers cannot be attributed
        g = GpuSample(index=i, uuid=_text(uuid))
        name = self._call(snap, i, "nvmlDeviceGetName", handle)
        g.name = _text(name) if name is not None else None
        g.memory_total, g.memory_used = self._memory(snap, i, handle)
        power = self._call(snap, i, "nvmlDeviceGetPowerUsage", handle)      # mW
        g.power_w = power / 1000.0 if power is not None else None
        energy = self._call(snap, i, "nvmlDeviceGetTotalEnergyConsumption", handle)   # mJ
        g.energy_j = energy / 1000.0 if energy is not None else None
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
        if self._initialised:
            try:
                self.nvml.nvmlShutdown()
            except Exception:
                pass
            self._initialised = False
