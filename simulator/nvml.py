"""A fake `pynvml` module for one simulated node: the subset the exporter calls.

Values come from the node's current instant (SimulatedNode.advance), so they agree with
the HAMi region files written for the same instant: a GPU's memory.used is its processes'
memory plus a small driver overhead, processes carry the host PIDs found in the regions'
slots, utilisation and power follow the workloads, the energy counter (mJ) only grows.
Errors are pynvml's own exception classes, raised where real NVML would raise them
(before nvmlInit, a bad index, a call the scenario marks unsupported, no new samples), and
any NVML return code a test injects for one call on one GPU (`FakeNvml.fail`).

MIG: a source that has `mig_now(index)` returning (slots, instances) puts that GPU in MIG
mode, as NVML shows it: nvmlDeviceGetMigMode answers [1, 1], the GPU's MIG devices are
reached by index (NOT_FOUND where a slot holds no instance), each with its own UUID,
memory, processes and attributes, and the parent's utilization counters answer
NOT_SUPPORTED. GPUs without MIG answer [0, 0].
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
class MigHandle:
    parent: int
    index: int

    def __repr__(self) -> str:
        return f"<simulated MIG device {self.parent}/{self.index}>"


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


@dataclass(frozen=True)
class MigNow:
    """One MIG device of a GPU in MIG mode (a GPU instance with one compute instance)."""

    index: int                 # position in nvmlDeviceGetMigDeviceHandleByIndex
    uuid: str                  # MIG-<uuid>
    gpu_instance_id: int
    compute_instance_id: int
    slices: int                # gpuInstanceSliceCount of its profile
    memory_size_mb: int        # the profile's memory (attributes.memorySizeMB)
    memory_used: int           # bytes
    procs: tuple[ProcNow, ...] = ()


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
        self._faults: dict[tuple[str, int | None], int] = {}
        self._init = 0
        # pynvml's exception classes and error codes, so `except nvml.NVMLError` works
        for name in dir(pynvml):
            if name.startswith(("NVMLError", "NVML_ERROR_")):
                setattr(self, name, getattr(pynvml, name))

    # -- plumbing
    def _raise(self, code: int) -> None:
        raise pynvml.NVMLError(code)

    def fail(self, fn: str, code: int, gpu: int | None = None) -> None:
        """From now on `fn` raises NVMLError(code) (on GPU `gpu` and its MIG devices; None: everywhere)."""
        self._faults[(fn, gpu)] = code

    def _check(self, fn: str, gpu: int | None = None) -> None:
        if not self._init:
            self._raise(pynvml.NVML_ERROR_UNINITIALIZED)
        if fn in self._unsupported:
            self._raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        code = self._faults.get((fn, gpu), self._faults.get((fn, None)))
        if code is not None:
            self._raise(code)

    def _index(self, fn: str, handle) -> int:
        index = handle.parent if isinstance(handle, MigHandle) else getattr(handle, "index", None)
        if not isinstance(handle, (DeviceHandle, MigHandle)) or not 0 <= index < self._src.gpu_count():
            self._check(fn)
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._check(fn, index)
        return index

    def _gpu(self, fn: str, handle: DeviceHandle) -> GpuNow:
        if isinstance(handle, MigHandle):
            self._check(fn)
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._src.gpu_now(self._index(fn, handle))

    def _mig_state(self, index: int) -> tuple[int, list[MigNow]] | None:
        mig_now = getattr(self._src, "mig_now", None)
        return mig_now(index) if mig_now is not None else None

    def _mig(self, fn: str, handle: MigHandle) -> MigNow:
        index = self._index(fn, handle)
        state = self._mig_state(index)
        found = [m for m in (state[1] if state else ()) if m.index == handle.index]
        if not found:
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return found[0]

    def _not_in_mig_mode(self, fn: str, handle: DeviceHandle) -> GpuNow:
        g = self._gpu(fn, handle)
        if self._mig_state(handle.index) is not None:
            self._raise(pynvml.NVML_ERROR_NOT_SUPPORTED)   # per-GPU counters are not kept in MIG mode
        return g

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
        self._check("nvmlDeviceGetHandleByIndex", index if isinstance(index, int) else None)
        if not isinstance(index, int) or not 0 <= index < self._src.gpu_count():
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return DeviceHandle(index)

    def nvmlDeviceGetUUID(self, handle: DeviceHandle | MigHandle) -> str:
        if isinstance(handle, MigHandle):
            return self._mig("nvmlDeviceGetUUID", handle).uuid
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: DeviceHandle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: DeviceHandle | MigHandle):
        if isinstance(handle, MigHandle):
            mig = self._mig("nvmlDeviceGetMemoryInfo", handle)
            total, used = mig.memory_size_mb << 20, mig.memory_used
        else:
            g = self._gpu("nvmlDeviceGetMemoryInfo", handle)
            total, used = g.memory_total, g.memory_used
        m = pynvml.c_nvmlMemory_t()
        m.total, m.used, m.free = total, used, max(total - used, 0)
        return m

    def nvmlDeviceGetUtilizationRates(self, handle: DeviceHandle):
        g = self._not_in_mig_mode("nvmlDeviceGetUtilizationRates", handle)
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = g.sm_pct, g.mem_util_pct
        return u

    def nvmlDeviceGetPowerUsage(self, handle: DeviceHandle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: DeviceHandle) -> int:
        return self._gpu("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetComputeRunningProcesses(self, handle: DeviceHandle | MigHandle) -> list:
        fn = "nvmlDeviceGetComputeRunningProcesses"
        if isinstance(handle, MigHandle):
            mig = self._mig(fn, handle)
            procs, gi, ci = list(mig.procs), mig.gpu_instance_id, mig.compute_instance_id
        else:
            self._gpu(fn, handle)
            state = self._mig_state(handle.index)
            if state is not None:   # the parent of MIG devices: every instance's processes
                procs = [(p, m.gpu_instance_id, m.compute_instance_id) for m in state[1] for p in m.procs]
                return [self._proc_info(p, gi, ci) for p, gi, ci in procs]
            procs, gi, ci = self._src.procs_now(handle.index), 0xFFFFFFFF, 0xFFFFFFFF
        return [self._proc_info(p, gi, ci) for p in procs]

    @staticmethod
    def _proc_info(p: ProcNow, gi: int, ci: int):
        info = pynvml.c_nvmlProcessInfo_t()
        info.pid, info.usedGpuMemory = p.pid, p.used_bytes
        info.gpuInstanceId, info.computeInstanceId = gi, ci
        return info

    # -- MIG
    def nvmlDeviceGetMigMode(self, handle: DeviceHandle) -> list[int]:
        self._gpu("nvmlDeviceGetMigMode", handle)
        on = self._mig_state(handle.index) is not None
        return [int(on), int(on)]   # [current, pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: DeviceHandle) -> int:
        self._gpu("nvmlDeviceGetMaxMigDeviceCount", handle)
        state = self._mig_state(handle.index)
        return state[0] if state else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: DeviceHandle, index: int) -> MigHandle:
        self._gpu("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        state = self._mig_state(handle.index)
        if state is None or not 0 <= index < state[0]:
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not any(m.index == index for m in state[1]):
            self._raise(pynvml.NVML_ERROR_NOT_FOUND)
        return MigHandle(handle.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, handle) -> int:
        self._check("nvmlDeviceIsMigDeviceHandle")
        return int(isinstance(handle, MigHandle))

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: MigHandle) -> DeviceHandle:
        self._mig("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        return DeviceHandle(handle.parent)

    def nvmlDeviceGetGpuInstanceId(self, handle: MigHandle) -> int:
        if not isinstance(handle, MigHandle):
            self._check("nvmlDeviceGetGpuInstanceId")
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._mig("nvmlDeviceGetGpuInstanceId", handle).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, handle: MigHandle) -> int:
        if not isinstance(handle, MigHandle):
            self._check("nvmlDeviceGetComputeInstanceId")
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._mig("nvmlDeviceGetComputeInstanceId", handle).compute_instance_id

    def nvmlDeviceGetAttributes(self, handle: DeviceHandle | MigHandle):
        a = pynvml.c_nvmlDeviceAttributes()
        if isinstance(handle, MigHandle):
            mig = self._mig("nvmlDeviceGetAttributes", handle)
            a.gpuInstanceSliceCount = a.computeInstanceSliceCount = mig.slices
            a.memorySizeMB = mig.memory_size_mb
        else:
            g = self._gpu("nvmlDeviceGetAttributes", handle)
            state = self._mig_state(handle.index)
            a.gpuInstanceSliceCount = a.computeInstanceSliceCount = state[0] if state else 0
            a.memorySizeMB = g.memory_total >> 20
        return a

    def nvmlDeviceGetProcessUtilization(self, handle: DeviceHandle, lastSeenTimeStamp: int = 0) -> list:
        """Samples newer than lastSeenTimeStamp (µs); NVML raises NotFound when there are none."""
        self._not_in_mig_mode("nvmlDeviceGetProcessUtilization", handle)
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
