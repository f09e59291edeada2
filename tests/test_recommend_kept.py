"""The month's plan kept beside a readers' file (slicemeter.rightsizing.kept): ingest plans
after each refresh of a real readers' file and keeps the plan; the Right-sizing page shows a
kept plan only where it is the plan it would make itself, and plans by itself otherwise."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from slicemeter import store
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.ingest.headlines import HeadlineRefresher
from slicemeter.ingest.metrics import IngestMetrics
from slicemeter.rightsizing.kept import Stamp, data_stamp, keep_plan, kept_path, read_kept
from slicemeter.rightsizing.plan import build_plan, price_key
from slicemeter.store.reader_file import ReaderFile
from slicemeter.testkit.ingest_helpers import poll
from slicemeter.testkit.recommend_rows import A, A100, add_slice_hour, build_fleet

NOV = datetime(2026, 11, 20, 12, tzinfo=timezone.utc)


@pytest.fixture
def live(tmp_path):
    con = store.connect(tmp_path / "live.duckdb")
    build_fleet(con)
    yield con
    con.close()


def _refresh_stamp(path) -> tuple[str, int]:
    with store.connect(path, read_only=True) as con:
        return data_stamp(con)


def _kept_refresh(path):
    kept = read_kept(kept_path(path))
    return kept[0].refresh if kept else None


def _assert_same_plan(kept, planned) -> None:
    for name in ("slices", "placement", "groups"):
        pd.testing.assert_frame_equal(getattr(kept, name), getattr(planned, name), check_dtype=False, obj=name)
    assert {k: v for k, v in kept.summary.items() if k != "plan_seconds"} == \
        {k: v for k, v in planned.summary.items() if k != "plan_seconds"}


def test_ingest_keeps_the_plan_of_each_refresh(live, tmp_path):
    """The plan is kept for the refresh the readers' file holds, equal to build_plan's on that
    file (Decimal prices included), and kept again after the next refresh although the
    refresher's interval is an hour."""
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    dest = reader.refresh()
    catalog = load_prices(DEFAULT_PRICES)
    refresher = HeadlineRefresher(dest, 3600, IngestMetrics().recommend, catalog, now=lambda: NOV,
                                  replan_gap_s=0).start()
    try:
        first = _refresh_stamp(dest)
        poll(lambda: _kept_refresh(dest) == first[1], "the first refresh's plan")
        stamp, kept = read_kept(kept_path(dest))
        assert stamp == Stamp(*first, "2026-11", 0.2, price_key(catalog))
        with store.connect(dest, read_only=True) as con:
            planned = build_plan(con, "2026-11", 0.2, catalog)
        assert planned.summary["gpus_freeable"] > 0 and planned.placement["price_gpu_hour"].notna().any()
        _assert_same_plan(kept, planned)

        # a new pod on a GPU that the plan freed: the next refresh's plan keeps that GPU
        with store.transaction(live):
            for h in range(20, 24):
                add_slice_hour(live, h, A, "a-0", "a0-1", "late", total=A100[1], mem_peak=0.9 * A100[1],
                               sm_mean=0.9, alloc_mem=int(0.95 * A100[1]), alloc_cores=0.95)
            live.execute("INSERT INTO reader_changes (hour) SELECT DISTINCT hour FROM slice_hour "
                         "WHERE pod_uid = 'late'")
        reader.refresh()
        second = _refresh_stamp(dest)
        assert second[1] > first[1]
        poll(lambda: _kept_refresh(dest) == second[1], "the next refresh's plan")
        _, kept = read_kept(kept_path(dest))
        with store.connect(dest, read_only=True) as con:
            planned = build_plan(con, "2026-11", 0.2, catalog)
        assert "late" in set(kept.slices["pod_uid"])
        _assert_same_plan(kept, planned)
    finally:
        refresher.stop()


def test_a_kept_plan_serves_only_the_plan_asked_for():
    kept = Stamp("store-1", 7, "2026-11", 0.2, price_key(None))
    assert kept.serves(kept) and kept.serves(replace(kept, refresh=8))   # the refresh before
    assert not kept.serves(replace(kept, refresh=9))
    for other in (replace(kept, store_id="store-2"), replace(kept, month="2026-10"),
                  replace(kept, headroom=0.4), replace(kept, prices=price_key({"NVIDIA L4": "0.80"}))):
        assert not kept.serves(other), other



class _Clock:
    """time.monotonic for ingest.headlines, moved on only by the refresher's own waits."""

    def __init__(self):
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t


class _Waits:
    """The refresher's stop event: never set; a wait moves the clock on by its timeout."""

    def __init__(self, clock: _Clock):
        self.clock = clock

    def is_set(self) -> bool:
        return False

    def wait(self, timeout: float) -> bool:
        self.clock.t += timeout
        return False


@pytest.mark.parametrize("gap_s, changed_at_s, expect_s", [
    (30.0, 2.0, 30.0),      # a refresh 2 s after the plan began: planned again 30 s after it
    (30.0, 45.0, 45.0),     # a refresh after the gap: planned again at once (the next 1 s poll)
    (0.0, 3.0, 3.0),        # no gap: each refresh is planned as it is seen
    (30.0, None, 600.0),    # no refresh: the interval
])
def test_a_refresh_is_planned_no_sooner_than_the_gap_after_the_last_plan(monkeypatch, tmp_path, gap_s,
                                                                       changed_at_s, expect_s):
    import slicemeter.ingest.headlines as headlines

    clock = _Clock()
    monkeypatch.setattr(headlines, "time", clock)
    refresher = HeadlineRefresher(tmp_path / "snapshot.duckdb", 600, IngestMetrics().recommend, replan_gap_s=gap_s)
    refresher._stop = _Waits(clock)
    started = clock.t
    monkeypatch.setattr(refresher, "_snapshot_version", lambda: "refresh-1" if changed_at_s is not None
                        and clock.t - started >= changed_at_s else "refresh-0")
    refresher._wait(600, "refresh-0", started)
    assert clock.t - started == expect_s


def app(db: str) -> None:
    from slicemeter.dashboard.data import scope_connection
    from slicemeter.dashboard.right_sizing import render
    from slicemeter.store import connect

    import streamlit as st
    con = connect(db, read_only=True)
    try:
        if st.session_state.get("tenant"):
            scope_connection(con, st.session_state["tenant"])
        render(con, "2026-11")
    finally:
        con.close()


def test_the_page_shows_the_kept_plan_of_its_data_only(live, tmp_path, monkeypatch):
    """A kept plan whose figures differ from what the page would plan (freeable GPUs set to
    7) shows where its stamp matches, and not for another headroom, for a tenant's view,
    when it is two refreshes old, or when the file is damaged."""
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    dest = reader.refresh()
    monkeypatch.setenv("SLICEMETER_DB", str(dest))
    catalog = load_prices(DEFAULT_PRICES)   # what the page prices with
    with store.connect(dest, read_only=True) as con:
        data = data_stamp(con)
        plan = build_plan(con, "2026-11", 0.2, catalog)
    plan.summary["gpus_freeable"] = 7

    def page(**state):
        at = AppTest.from_function(app, args=(str(dest),), default_timeout=60)
        for k, v in state.items():
            at.session_state[k] = v
        at.run()
        assert not at.exception, at.exception
        return at

    def freeable(at):
        return {m.label: m.value for m in at.metric}["GPUs freeable"]

    assert freeable(page()) == "4 of 8"   # nothing kept: planned by the page
    keep_plan(plan, kept_path(dest), Stamp(*data, "2026-11", 0.2, price_key(catalog)))
    at = page()
    assert freeable(at) == "7 of 8" and "Planned by ingest from this data." in [c.value for c in at.caption]
    at.slider(key="recommend_headroom").set_value(40).run()
    assert freeable(at) == "3 of 8"
    assert freeable(page(tenant="acme")) != "7 of 8"

    keep_plan(plan, kept_path(dest), Stamp(data[0], data[1] - 1, "2026-11", 0.2, price_key(catalog)))
    at = page()
    assert freeable(at) == "7 of 8" and any("previous refresh" in c.value for c in at.caption)
    keep_plan(plan, kept_path(dest), Stamp(data[0], data[1] - 2, "2026-11", 0.2, price_key(catalog)))
    assert freeable(page()) == "4 of 8"

    # a damaged kept file costs its time saving only
    keep_plan(plan, kept_path(dest), Stamp(*data, "2026-11", 0.2, price_key(catalog)))
    whole = kept_path(dest).read_bytes()
    kept_path(dest).write_bytes(whole[: len(whole) // 2])
    assert read_kept(kept_path(dest)) is None and freeable(page()) == "4 of 8"
