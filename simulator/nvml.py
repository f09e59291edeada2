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

Health: a source that has `health_now(index)` returning a HealthNow answers the health calls
from it (temperatures, fan, ECC, retired pages, remapped rows, PCIe replays, clock-event
reasons, violation time); without one a GPU is cool and error-free. A lost GPU answers
GPU_IS_LOST to every call on it. Xid events (`queue_xid`) wait in the fake driver's queue
until an event set with the GPU registered drains them, as NVML's do.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Protocol

import pynvml   # nvidia-ml-py's module: its exception classes, constants and structures

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


@dataclass(frozen=True)
class HealthNow:
    """One GPU's health at the current instant, in NVML's units."""

    temperature_c: int = 40
    memory_temperature_c: int | None = 46      # None: the board has no memory sensor (field NOT_SUPPORTED)
    fan_pct: int = 30
    ecc: tuple[int, int, int, int] = (0, 0, 0, 0)   # corrected, uncorrected volatile; corrected, uncorrected aggregate
    retired_pages_pending: bool = False
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)   # corr, unc, pending, failure
    pcie_replays: int = 0
    clock_event_reasons: int = 0
    power_violation_ns: int = 0
    thermal_violation_ns: int = 0
    lost: bool = False


@dataclass(frozen=True)
class EventSet:
    id: int


@dataclass(frozen=True)
class EventData:
    """The fields of pynvml's c_nvmlEventData_t, with the fake's device handle."""

    device: DeviceHandle
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


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
        self._xid_queue: deque[tuple[int, int]] = deque()     # (GPU index, Xid code), the driver's queue
        self._registered: dict[int, dict[int, int]] = {}     # event set id -> GPU index -> event types
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
        if self._health(index).lost:
            self._raise(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def _health(self, index: int) -> HealthNow:
        health_now = getattr(self._src, "health_now", None)
        return health_now(index) if health_now is not None else HealthNow()

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

    # -- health
    def nvmlDeviceGetTemperatureV(self, handle: DeviceHandle, sensor: int, version: int = pynvml.nvmlTemperature_v1) -> int:
        self._gpu("nvmlDeviceGetTemperatureV", handle)
        if version != pynvml.nvmlTemperature_v1:
            self._raise(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return self._temperature(handle, sensor)

    def nvmlDeviceGetTemperature(self, handle: DeviceHandle, sensor: int) -> int:
        self._gpu("nvmlDeviceGetTemperature", handle)
        return self._temperature(handle, sensor)

    def _temperature(self, handle: DeviceHandle, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._health(handle.index).temperature_c

    def nvmlDeviceGetFieldValues(self, handle: DeviceHandle, fieldIds: list):
        self._gpu("nvmlDeviceGetFieldValues", handle)
        h = self._health(handle.index)
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for v, field_id in zip(values, fieldIds):
            v.fieldId = field_id
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP and h.memory_temperature_c is not None:
                v.valueType, v.nvmlReturn = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, pynvml.NVML_SUCCESS
                v.value.uiVal = h.memory_temperature_c
            else:   # NVML answers each field on its own: unknown or absent here
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetFanSpeed(self, handle: DeviceHandle) -> int:
        self._gpu("nvmlDeviceGetFanSpeed", handle)
        return self._health(handle.index).fan_pct

    def nvmlDeviceGetTotalEccErrors(self, handle: DeviceHandle, errorType: int, counterType: int) -> int:
        self._gpu("nvmlDeviceGetTotalEccErrors", handle)
        if errorType not in (0, 1) or counterType not in (0, 1):
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._health(handle.index).ecc[2 * counterType + errorType]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: DeviceHandle) -> int:
        self._gpu("nvmlDeviceGetRetiredPagesPendingStatus", device)
        return int(self._health(device.index).retired_pages_pending)

    def nvmlDeviceGetRemappedRows(self, device: DeviceHandle) -> tuple[int, int, int, int]:
        self._gpu("nvmlDeviceGetRemappedRows", device)
        return self._health(device.index).remapped_rows

    def nvmlDeviceGetPcieReplayCounter(self, handle: DeviceHandle) -> int:
        self._gpu("nvmlDeviceGetPcieReplayCounter", handle)
        return self._health(handle.index).pcie_replays

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: DeviceHandle) -> int:
        self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return self._health(handle.index).clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: DeviceHandle) -> int:
        self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return self._health(handle.index).clock_event_reasons

    def nvmlDeviceGetViolationStatus(self, device: DeviceHandle, perfPolicyType: int):
        self._gpu("nvmlDeviceGetViolationStatus", device)
        h = self._health(device.index)
        ns = {pynvml.NVML_PERF_POLICY_POWER: h.power_violation_ns, pynvml.NVML_PERF_POLICY_THERMAL: h.thermal_violation_ns}
        if perfPolicyType not in ns:
            self._raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
        v = pynvml.c_nvmlViolationTime_t()
        v.referenceTime, v.violationTime = self._src.ts_ms * 1000, ns[perfPolicyType]
        return v

    # -- events
    def queue_xid(self, index: int, code: int) -> None:
        """The driver reports Xid `code` on GPU `index` (delivered to event sets it is registered in)."""
        self._xid_queue.append((index, code))

    def nvmlEventSetCreate(self) -> EventSet:
        self._check("nvmlEventSetCreate")
        es = EventSet(len(self._registered) + 1)
        self._registered[es.id] = {}
        return es

    def nvmlDeviceRegisterEvents(self, handle: DeviceHandle, eventTypes: int, eventSet: EventSet) -> None:
        self._gpu("nvmlDeviceRegisterEvents", handle)
        if not isinstance(eventSet, EventSet) or eventSet.id not in self._registered:
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if eventTypes & ~pynvml.nvmlEventTypeXidCriticalError:
            self._raise(pynvml.NVML_ERROR_NOT_SUPPORTED)    # the fake driver reports Xids only
        self._registered[eventSet.id][handle.index] = eventTypes

    def nvmlEventSetWait_v2(self, eventSet: EventSet, timeoutms: int) -> EventData:
        self._check("nvmlEventSetWait_v2")
        if not isinstance(eventSet, EventSet) or eventSet.id not in self._registered:
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        wanted = self._registered[eventSet.id]
        while self._xid_queue:
            index, code = self._xid_queue.popleft()
            if index in wanted:
                return EventData(DeviceHandle(index), pynvml.nvmlEventTypeXidCriticalError, code)
        self._raise(pynvml.NVML_ERROR_TIMEOUT)    # nothing within the timeout (the fake never blocks)

    def nvmlEventSetWait(self, eventSet: EventSet, timeoutms: int) -> EventData:
        return self.nvmlEventSetWait_v2(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: EventSet) -> None:
        self._check("nvmlEventSetFree")
        if self._registered.pop(getattr(eventSet, "id", None), None) is None:
            self._raise(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def __getattr__(self, name: str) -> Callable:
        # any other NVML entry point: real pynvml would need a GPU; say "not supported"
        if name.startswith("nvml"):
            def unsupported(*_a, **_k):
                self._check(name)
                self._raise(pynvml.NVML_ERROR_NOT_SUPPORTED)
            return unsupported
        raise AttributeError(name)
