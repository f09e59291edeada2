"""NVML readings through an injected pynvml-compatible module.

The real `pynvml` on a node, the simulator's fake in tests and demos. Every call is
guarded on its own: one failing call (or one failing GPU) costs that value only, never the
rest of the node's Tick.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used on this machine (no library, no driver)."""


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

    def _call(self, snap: NvmlSnapshot, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, fn)(*args)
        except Exception as exc:  # NVMLError subclasses, NotSupported, missing function
            snap.errors += 1
            log.debug("NVML %s%r failed: %s", fn, args[1:] if args else (), exc)
            return None

    def read(self) -> NvmlSnapshot:
        snap = NvmlSnapshot()
        if not self._initialised:
            self._call(snap, "nvmlInit")
            if snap.errors:
                return snap
            self._initialised = True
        drv = self._call(snap, "nvmlSystemGetDriverVersion")
        snap.driver = _text(drv) if drv is not None else None
        count = self._call(snap, "nvmlDeviceGetCount")
        for i in range(int(count or 0)):
            handle = self._call(snap, "nvmlDeviceGetHandleByIndex", i)
            if handle is None:
                continue
            uuid = self._call(snap, "nvmlDeviceGetUUID", handle)
            if uuid is None:
                continue   # without its identity a GPU's numbers cannot be attributed
            g = GpuSample(index=i, uuid=_text(uuid))
            name = self._call(snap, "nvmlDeviceGetName", handle)
            g.name = _text(name) if name is not None else None
            mem = self._call(snap, "nvmlDeviceGetMemoryInfo", handle)
            if mem is not None:
                g.memory_total, g.memory_used = int(mem.total), int(mem.used)
            util = self._call(snap, "nvmlDeviceGetUtilizationRates", handle)
            if util is not None:
                g.util_gpu_pct, g.util_mem_pct = float(util.gpu), float(util.memory)
            power = self._call(snap, "nvmlDeviceGetPowerUsage", handle)      # mW
            g.power_w = power / 1000.0 if power is not None else None
            energy = self._call(snap, "nvmlDeviceGetTotalEnergyConsumption", handle)   # mJ
            g.energy_j = energy / 1000.0 if energy is not None else None
            procs = self._call(snap, "nvmlDeviceGetComputeRunningProcesses", handle)
            if procs is not None:
                g.processes = {}
                for p in procs:
                    used = getattr(p, "usedGpuMemory", None)
                    g.processes[int(p.pid)] = int(used) if isinstance(used, int) and used >= 0 else 0
            g.process_sm_util = self._process_util(snap, handle, i)
            snap.gpus.append(g)
        return snap

    def _process_util(self, snap: NvmlSnapshot, handle: Any, index: int) -> dict[int, float] | None:
        since = self._last_seen_us.get(index, 0)
        try:
            samples = self.nvml.nvmlDeviceGetProcessUtilization(handle, since)
        except Exception as exc:
            # NVML_ERROR_NOT_FOUND just means no samples since `since`: no process ran a kernel.
            if type(exc).__name__.endswith("NotFound"):
                return {}
            snap.errors += 1
            return None
        # Several samples per process in the window: each is a percentage, so average them.
        acc: dict[int, list[float]] = {}
        for s in samples or ():
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
