"""The one clock every slicemeter process reads: real UTC time, or a pretend "now".

`SLICEMETER_NOW=2026-11-01T09:30:00Z` makes the process believe the clock read that instant
when the process started; it then runs forward at the real rate. `slicemeter demo --now`
sets it for every child it starts (each to the demo's own pretend time at that start), so
backfill, exporters, ingest and the dashboard agree to within a process start, and a demo
or a test can be run as of the 1st or the 15th of any month.
"""
from __future__ import annotations

import functools
import os
import time
from datetime import datetime, timedelta, timezone

ENV = "SLICEMETER_NOW"
_STARTED = time.monotonic()


def parse_instant(text: str, what: str = ENV) -> datetime:
    """An ISO 8601 date or date-time as an aware UTC datetime (naive = UTC); ValueError
    names `what` and the text."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not an ISO 8601 date-time like 2026-11-15T09:30:00Z") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.astimezone(timezone.utc)


@functools.lru_cache(maxsize=4)
def _pretend(text: str) -> datetime:
    return parse_instant(text)


def now() -> datetime:
    """Aware UTC now: the pretend clock when SLICEMETER_NOW is set, else the real one."""
    text = os.environ.get(ENV)
    if text:
        return _pretend(text) + timedelta(seconds=time.monotonic() - _STARTED)
    return datetime.now(timezone.utc)


def time_s() -> float:
    """Unix seconds, like time.time(), from now()."""
    return now().timestamp()


def now_ms() -> int:
    return int(time_s() * 1000)
