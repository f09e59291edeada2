"""GPU health of the simulated fleet: a healthy baseline and the faults a scenario injects.

A node's `faults:` (docs/simulator.md, Faults) put one of four faults on one of its GPUs for
a spell of time:

- `xid`: the driver reports Xid `xid` on the GPU every `every_s` seconds of the spell;
- `ecc`: `corrected` and `uncorrected` ECC errors at the spell's start (the counters keep them),
  with a row remap and a page retirement pending until its end when any is uncorrectable;
- `thermal-throttle`: the GPU runs hot, its clocks held down for heat (SW and HW thermal
  slowdown), thermal violation time growing by the spell's length;
- `off-bus`: the GPU falls off the bus; every NVML call on it answers GPU_IS_LOST.

Everything is a function of the instant (numpy arrays of Tick times), so the fake NVML
(one instant) and time travel (a chunk of Ticks) read the same values.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import Field, PlainValidator, model_validator

from slicemeter.config_schema import Schema, invalid, one_of
from slicemeter.xid import CRITICAL_XIDS

FAULT_KINDS = ("xid", "ecc", "thermal-throttle", "off-bus")
THERMAL_SLOWDOWN = 0x20 | 0x40      # nvmlClocksEventReasonSwThermalSlowdown | HwThermalSlowdown
GPU_IDLE = 0x1                      # nvmlClocksEventReasonGpuIdle
THROTTLE_TEMPERATURE_C = 92.0


def _instant(value: Any) -> dt.datetime:
    """A UTC date-time (`2026-11-12T14:00`, naive = UTC) or a date (its midnight)."""
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise invalid(f"{value!r} is not a date-time (YYYY-MM-DDTHH:MM)") from None
    if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        value = dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, dt.datetime):
        raise invalid(f"expected a date-time, got {value!r}")
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


class FaultSpec(Schema):
    kind: one_of("fault kind", FAULT_KINDS)
    gpu: Annotated[int, Field(ge=0)]
    at: Annotated[dt.datetime, PlainValidator(_instant)]
    minutes: Annotated[float, Field(gt=0, le=7 * 24 * 60)] = 60
    xid: Annotated[int, Field(ge=1, le=65535)] | None = None
    every_s: Annotated[float, Field(ge=1)] = 60
    corrected: Annotated[int, Field(ge=0)] = 0
    uncorrected: Annotated[int, Field(ge=0)] = 0

    @model_validator(mode="after")
    def _keys_of_the_kind(self):
        if (self.kind == "xid") != (self.xid is not None):
            raise invalid("an xid fault names its code (xid: 79); other kinds take none", "xid")
        if self.kind != "ecc" and {"corrected", "uncorrected"} & self.model_fields_set:
            raise invalid("corrected / uncorrected belong to an ecc fault", "corrected")
        if self.kind == "ecc" and not self.corrected + self.uncorrected:
            raise invalid("an ecc fault needs corrected or uncorrected errors", "uncorrected")
        return self

    def resolved(self) -> Fault:
        start = int(self.at.timestamp() * 1000)
        return Fault(self.kind, self.gpu, start, start + int(self.minutes * 60_000), self.xid,
                     int(self.every_s * 1000), self.corrected, self.uncorrected)


@dataclass(frozen=True)
class Fault:
    kind: str
    gpu: int
    start_ms: int
    end_ms: int
    xid: int | None = None
    every_ms: int = 60_000
    corrected: int = 0
    uncorrected: int = 0

    def active(self, t_ms: np.ndarray) -> np.ndarray:
        return (t_ms >= self.start_ms) & (t_ms < self.end_ms)

    def xid_events(self, t0_ms: np.ndarray, t1_ms: np.ndarray) -> np.ndarray:
        """How many of this Xid's reports fall in (t0, t1]: at start, start + every, ... before the end."""
        if self.kind != "xid":
            return np.zeros(np.shape(t1_ms), dtype=np.int64)
        last = (self.end_ms - 1 - self.start_ms) // self.every_ms       # index of the spell's last report

        def upto(t: np.ndarray) -> np.ndarray:   # reports at or before t
            k = np.floor_divide(np.asarray(t, dtype=np.int64) - self.start_ms, self.every_ms)
            return np.where(np.asarray(t) < self.start_ms, 0, np.minimum(k, last) + 1)
        return upto(t1_ms) - upto(t0_ms)


@dataclass
class HealthArrays:
    """One GPU's health over Ticks (arrays of the Ticks' length), as NVML would answer."""

    temperature_c: np.ndarray
    memory_temperature_c: np.ndarray
    fan_pct: np.ndarray
    ecc_corrected: np.ndarray           # volatile = aggregate: the simulated driver never reloads
    ecc_uncorrected: np.ndarray
    retired_pages_pending: np.ndarray
    remapped_uncorrectable: np.ndarray
    remapped_pending: np.ndarray
    clock_event_reasons: np.ndarray
    thermal_violation_ns: np.ndarray
    lost: np.ndarray
    xid_events: np.ndarray              # reports in (t - interval, t]
    xid_last: np.ndarray                # the last code among them, 0 = none
    xid_critical: np.ndarray            # the last critical code among them, 0 = none


def health(faults: tuple[Fault, ...], tdp_watts: float, t_ms: np.ndarray, power_mw: np.ndarray, sm_pct: np.ndarray,
           interval_ms: int) -> HealthArrays:
    """One GPU's health at the Ticks `t_ms` from its load and its faults (each of this GPU)."""
    t_ms = np.asarray(t_ms, dtype=np.int64)
    load = np.clip(np.asarray(power_mw, dtype=np.float64) / 1000 / tdp_watts, 0, 1)
    temp = 30 + 55 * load
    reasons = np.where(np.asarray(sm_pct) == 0, GPU_IDLE, 0).astype(np.int64)
    n = len(t_ms)
    corrected, uncorrected = np.zeros(n, np.int64), np.zeros(n, np.int64)
    pending, lost = np.zeros(n, bool), np.zeros(n, bool)
    violation = np.zeros(n, np.int64)
    xid_events, xid_last, xid_critical = np.zeros(n, np.int64), np.zeros(n, np.int32), np.zeros(n, np.int32)
    for f in sorted(faults, key=lambda f: f.start_ms):
        on = f.active(t_ms)
        if f.kind == "ecc":
            began = t_ms >= f.start_ms
            corrected += np.where(began, f.corrected, 0)
            uncorrected += np.where(began, f.uncorrected, 0)
            if f.uncorrected:
                pending |= on
        elif f.kind == "thermal-throttle":
            temp = np.where(on, np.maximum(temp, THROTTLE_TEMPERATURE_C), temp)
            reasons = np.where(on, reasons | THERMAL_SLOWDOWN, reasons)
            violation += np.clip(t_ms - f.start_ms, 0, f.end_ms - f.start_ms) * 1_000_000
        elif f.kind == "off-bus":
            lost |= on
        else:
            k = f.xid_events(t_ms - interval_ms, t_ms)
            xid_events += k
            xid_last = np.where(k > 0, f.xid, xid_last)
            if f.xid in CRITICAL_XIDS:
                xid_critical = np.where(k > 0, f.xid, xid_critical)
    return HealthArrays(
        temperature_c=np.round(temp), memory_temperature_c=np.round(temp + 6), fan_pct=np.round(30 + 60 * load),
        ecc_corrected=corrected, ecc_uncorrected=uncorrected, retired_pages_pending=pending,
        remapped_uncorrectable=uncorrected, remapped_pending=pending, clock_event_reasons=reasons,
        thermal_violation_ns=violation, lost=lost, xid_events=xid_events, xid_last=xid_last, xid_critical=xid_critical)


def xid_reports(faults: tuple[Fault, ...], t0_ms: int, t1_ms: int) -> list[int]:
    """The Xid codes reported in (t0, t1], in time order (the fake NVML queues them)."""
    out: list[tuple[int, int]] = []
    for f in faults:
        k = int(f.xid_events(np.array([t0_ms]), np.array([t1_ms]))[0]) if f.kind == "xid" else 0
        if k:
            first = max(0, -(-(t0_ms + 1 - f.start_ms) // f.every_ms))
            out.extend((f.start_ms + (first + j) * f.every_ms, f.xid) for j in range(k))
    return [code for _, code in sorted(out)]
