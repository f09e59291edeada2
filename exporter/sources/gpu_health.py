"""GPU health as NVML reports it: what each figure means, the critical Xid class, throttling,
and the bounded Xid tally (docs/health.md).

Pure definitions and small state; exporter/sources/nvml.py makes the calls. Numbers are
nvml.h's (a stable ABI) so this module needs no pynvml import.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from slicemeter.xid import CRITICAL_XIDS

# nvml.h constants (pynvml's names in comments)
TEMPERATURE_GPU = 0                 # NVML_TEMPERATURE_GPU
FI_DEV_MEMORY_TEMP = 82             # NVML_FI_DEV_MEMORY_TEMP
ECC_CORRECTED, ECC_UNCORRECTED = 0, 1          # NVML_MEMORY_ERROR_TYPE_*
ECC_VOLATILE, ECC_AGGREGATE = 0, 1             # NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC
PERF_POLICY_POWER, PERF_POLICY_THERMAL = 0, 1  # NVML_PERF_POLICY_*
EVENT_XID_CRITICAL = 0x8            # nvmlEventTypeXidCriticalError
NVML_SUCCESS = 0
NVML_ERROR_TIMEOUT = 10             # nvmlEventSetWait: no event within the timeout

# nvmlFieldValue_t.valueType -> the member of its value union
FIELD_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

# Clock-event reasons (nvmlClocksEventReason*): bit -> the label slicemeter gives it
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Throttled = clocks held down by power or heat; idle, application clocks, sync boost and the
# display clock are choices or rest, not a degraded GPU.
THROTTLE_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
THERMAL_REASONS = 0x20 | 0x40

# the critical Xid class is shared with the simulator's history: slicemeter/xid.py

# Bounds on what a storm of Xid events can cost: waits per Tick (the rest stay queued in the
# driver for the next Tick) and distinct codes kept per GPU (further codes counted as other).
MAX_XID_WAITS_PER_TICK = 1000
MAX_XID_CODES = 32
XID_OTHER = -1                      # the key of codes past MAX_XID_CODES


def is_critical_xid(code: int | None) -> bool:
    return code in CRITICAL_XIDS


def throttled(reasons: int | None) -> bool | None:
    return None if reasons is None else bool(reasons & THROTTLE_REASONS)


def field_value(v) -> float | int | None:
    """An nvmlFieldValue_t's value, or None when NVML answered that field with an error."""
    if int(v.nvmlReturn) != NVML_SUCCESS:
        return None
    member = FIELD_VALUE_MEMBER.get(int(v.valueType))
    return getattr(v.value, member) if member else None


@dataclass(slots=True)
class XidTally:
    """One GPU's Xid events: those since the last Tick, and per code since the exporter started,
    in bounded memory whatever the number of events."""

    tick_events: int = 0
    tick_last: int | None = None
    tick_critical: int | None = None
    totals: dict[int, int] = field(default_factory=dict)   # code -> events: MAX_XID_CODES, critical ones, XID_OTHER
    last: int | None = None

    def add(self, code: int) -> None:
        self.tick_events += 1
        self.tick_last = self.last = code
        if code in CRITICAL_XIDS:
            self.tick_critical = code
        kept = len(self.totals) - (XID_OTHER in self.totals)
        # a critical code always keeps its own count (the class is small): alerts select it by code
        key = code if code in self.totals or kept < MAX_XID_CODES or code in CRITICAL_XIDS else XID_OTHER
        self.totals[key] = self.totals.get(key, 0) + 1

    def take(self) -> tuple[int, int | None, int | None]:
        """(events, last code, last critical code) since the previous take."""
        out = (self.tick_events, self.tick_last, self.tick_critical)
        self.tick_events, self.tick_last, self.tick_critical = 0, None, None
        return out


@dataclass(slots=True)
class GpuHealth:
    """One GPU's health figures from one read; None = not offered or failed."""

    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    fan_speed_pct: float | None = None
    ecc: dict[tuple[str, str], int] = field(default_factory=dict)   # (corrected|uncorrected, volatile|aggregate)
    retired_pages_pending: bool | None = None
    remapped_rows: tuple[int, int] | None = None       # rows remapped for (correctable, uncorrectable) errors
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    pcie_replays: int | None = None
    clock_event_reasons: int | None = None
    power_violation_s: float | None = None
    thermal_violation_s: float | None = None
    # Xid events since the previous Tick; None where the GPU's events cannot be registered
    xid_events: int | None = None
    xid_last_code: int | None = None
    xid_critical_code: int | None = None
    xid_totals: dict[int, int] | None = None
    xid_last_ever: int | None = None
