"""dashboard/right_sizing.py render(con, month) under Streamlit's AppTest, on a real
DuckDB file."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from slicemeter.store import connect
from slicemeter.testkit.recommend_rows import build_fleet

def app(db_path: str, month: str) -> None:
    from slicemeter.dashboard.right_sizing import render
    from slicemeter.store import connect

    con = connect(db_path, read_only=True)
    try:
        render(con, month)
    finally:
        con.close()


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "fleet.duckdb"
    con = connect(path)
    build_fleet(con)
    con.close()
    return str(path)


def run(db, month="2026-11"):
    at = AppTest.from_function(app, args=(db, month), default_timeout=60)
    return at.run()


def test_page_shows_plan_and_slices(db):
    at = run(db)
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["GPUs freeable"] == "4 of 8"
    assert metrics["Plan vs first-fit decreasing"] == "4 GPUs"
    slices = at.dataframe[1].value
    assert len(slices) == 8 and "gpumem rec. (MiB)" in slices.columns
    groups = at.dataframe[0].value
    assert sorted(groups["Planned"]) == [1, 1, 2]


def test_headroom_and_flag_filter(db):
    at = run(db)
    at.slider(key="recommend_headroom").set_value(40).run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["GPUs freeable"] == "3 of 8"
    # granted 50 %: over-requested where p99 use is below 25 % (s1-s4 at 20 %, l at 10 %)
    # and the whole-GPU pod at 5 %; b1 and b2 use 30 %: not over-requested, no OOM risk
    at.multiselect(key="recommend_flags").set_value(["oom_risk"]).run()
    assert len(at.dataframe[1].value) == 0
    at.multiselect(key="recommend_flags").set_value(["over_requested"]).run()
    shown = at.dataframe[1].value
    assert sorted(shown["Pod"]) == ["pod-l", "pod-s1", "pod-s2", "pod-s3", "pod-s4", "pod-w"]


def test_empty_month_says_so(db):
    at = run(db, "2026-10")
    assert not at.exception
    assert any("No metered GPUs in 2026-10" in i.value for i in at.info)
