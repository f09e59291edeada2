"""A fake `pynvml` module for one simulated node: the subset the exporter calls.

Values come from the node's current instant (SimulatedNode.advance), so they agree with
the HAMi region files written for the same instant: a GPU's memory.used is its processes'
memory plus a small driver overhead, processes carry the host PIDs found in the regions'
slots, utilisation and power follow the workloads, the energy counter (mJ) only grows.
Errors are pynvml's own exception classes, raised where real NVML would raise them
(before nvmlInit, a bad index, a call the scenario marks unsupported, no new samples).
"""
from __future__ import annotations

from dataclasses import dataclass
import warnings
from typing import Callable, Protocol

with warnings.catch_warnings():
    # the `pynvml` wrapper warns that it is deprecated in favour of nvidia-ml-py; same module
    warnings.simplefilter("ignore", FutureWarning)
    import pynvml

NVMLError = pynvml.NVMLError
DRIVER_VERSION = "550.90.07"


@dataclass(frozen=True)
class DeviceHandle:
    index: int

    def __repr__(self) -> str:
        return f"<simulated nvmlDevice {self.index}>"


@dataclass(frozen=True)
class GpuNow:
    uuid: str
    name: str
    memory_total: int          # bytes
    memory_used: int           # bytes
    sm_pct: int
    mem_util_pct: int
    power_mw: int
    energy_mj: int


@dataclass(frozen=True)
class ProcNow:
    pid: int                   # host PID
    used_bytes: int
    sm_pct: int
    mem_util_pct: int


class NodeSource(Protocol):
    ts_ms: int

    def gpu_now(self, index: int) -> GpuNow: ...

    def procs_now(self, index: int) -> list[ProcNow]: ...

    def gpu_count(self) -> int: ...


class FakeNvml:
    """Module-like: `nvml.nvmlInit()`, `nvml.NVMLError_NotSupported`, ... like pynvml."""

    def __init__(self, source: NodeSource, unsupported: frozenset[str] = frozenset()):
        self._src = source
        self._unsupported = unsupported
        self._init = 0
        # pynvml's exception classes and error codes, so `except nvml.NVMLError` works
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_ERROR_")):
                setattr(self, name, getattr(pynvml, name))

    # -- plumbing
    def _raise(self, code: int) -> None:
        raise pynvml.NVMLError(code)

    def _check(self, fn: str) -> None:
        if not self._init:
            self._raise(pynvml.NVML_ERROR_UNINITIALIZED)
        if fn in self._unsupported:
            self._raise(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _gpu(self, fn: str, handle: DeviceHandle) -> GpuNow:
        self._check(fn)
        if not isinstance(handle, DeviceHandle) or not 0 <= handle.index < self._src.gpu_count():
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._src.gpu_now(handle.index)

    # -- the pynvml subset
    def nvmlInit(self) -> None:
        self._init += 1

    def nvmlShutdown(self) -> None:
        if not self._init:
            self._raise(pynvml.NVML_ERROR_UNINITIALIZED)
        self._init -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return DRIVER_VERSION

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        return self._src.gpu_count()

    def nvmlDeviceGetHandleByIndex(self, index: int) -> DeviceHandle:
        self._check("nvmlDeviceGetHandleByIndex")
        if not isinstance(index, int) or not 0 <= index < self._src.gpu_count():
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return DeviceHandle(index)

    def nvmlDeviceGetUUID(self, handle: DeviceHandle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: DeviceHandle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: DeviceHandle):
        g = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        m = pynvml.c_nvmlMemory_t()
        m.total, m.used, m.free = g.memory_total, g.memory_used, max(g.memory_total - g.memory_used, 0)
        return m

    def nvmlDeviceGetUtilizationRates(self, handle: DeviceHandle):
        g = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = g.sm_pct, g.mem_util_pct
        return u

    def nvmlDeviceGetPowerUsage(self, handle: DeviceHandle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: DeviceHandle) -> int:
        return self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetComputeRunningProcesses(self, handle: DeviceHandle) -> list:
        self._gpu("nvmlDeviceGetComputeRunningProcesses", handle)
        out = []
        for p in self._src.procs_now(handle.index):
            info = pynvml.c_nvmlProcessInfo_t()
            info.pid, info.usedGpuMemory = p.pid, p.used_bytes
            info.gpuInstanceId = info.computeInstanceId = 0xFFFFFFFF
            out.append(info)
        return out

    def nvmlDeviceGetProcessUtilization(self, handle: DeviceHandle, lastSeenTimeStamp: int = 0) -> list:
        """Samples newer than lastSeenTimeStamp (µs); NVML raises NotFound when there are none."""
        self._gpu("nvmlDeviceGetProcessUtilization", handle)
        ts_us = self._src.ts_ms * 1000
        procs = self._src.procs_now(handle.index)
        if ts_us <= lastSeenTimeStamp or not procs:
            self._raise(pynvml.NVML_ERROR_NOT_FOUND)
        out = []
        for p in procs:
            s = pynvml.c_nvmlProcessUtilizationSample_t()
            s.pid, s.timeStamp, s.smUtil, s.memUtil, s.encUtil, s.decUtil = p.pid, ts_us, p.sm_pct, p.mem_util_pct, 0, 0
            out.append(s)
        return out

    def __getattr__(self, name: str) -> Callable:
        # any other NVML entry point: real pynvml would need a GPU; say "not supported"
        if name.startswith("nvml"):
            def unsupported(*_a, **_k):
                self._check(name)
                self._raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return unsupported
        raise AttributeError(name)
