"""slicemeter.clock: the real clock, or a pretend now that runs forward at the real rate."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from slicemeter import clock


def test_the_real_clock_without_the_variable(monkeypatch):
    monkeypatch.delenv(clock.ENV, raising=False)
    before = datetime.now(timezone.utc)
    assert before <= clock.now() <= datetime.now(timezone.utc)


def test_a_pretend_now_runs_forward(monkeypatch):
    monkeypatch.setenv(clock.ENV, "2026-12-01T09:00:00Z")
    first = clock.now()
    assert datetime(2026, 12, 1, 9, tzinfo=timezone.utc) <= first < datetime(2026, 12, 1, 10, tzinfo=timezone.utc)
    assert clock.now() >= first and abs(clock.time_s() - first.timestamp()) < 3600
    assert clock.now_ms() // 1000 >= int(first.timestamp())
    monkeypatch.setenv(clock.ENV, "2026-11-15")          # a date is its UTC midnight
    assert clock.now() - datetime(2026, 11, 15, tzinfo=timezone.utc) < timedelta(hours=1)


def test_a_bad_value_names_the_variable(monkeypatch):
    monkeypatch.setenv(clock.ENV, "the first of December")
    with pytest.raises(ValueError, match="SLICEMETER_NOW"):
        clock.now()
