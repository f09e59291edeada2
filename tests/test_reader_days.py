"""The readers' day figures (sql/schema/090_reader_days.sql): every query of the dashboard
and the dividend reads the same from a readers' file, which keeps them, as from the store,
which computes them from the hours (sql/views/310_days.sql), for the fleet and for each
tenant's scoped view; and a refresh keeps them current as hours change."""
from __future__ import annotations

import math
import shutil
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from slicemeter import store
from slicemeter.chargeback.bill import BASES, IDLE_POLICIES, SHARES, compute_bill
from slicemeter.chargeback.kept import keep_hours, kept_current
from slicemeter.dashboard.data import scope_connection
from slicemeter.store.reader_file import ReaderFile
from slicemeter.testkit.fleet_fixture import build_fleet_db

MONTH = {"start": datetime(2026, 11, 1), "end": datetime(2026, 12, 1)}
PARAMS = {  # the pages' own parameters beside the month
    "energy_by_tenant": {"carbon_g_per_kwh": 320.0},
    "gpu_events": {"throttled_share": 0.25, "gpus": slice(None)},
    "gpu_table": {"throttled_share": 0.25, "tenant": None, "node": None, "model": None, "driver": None,
                  "health": None, "search": None, "sort": "problems", "price_model": ["NVIDIA L4"],
                  "price_node": ["gpu-node-4"], "price_cluster": ["https://globex.tenants.example:6443"],
                  "price_per_h": ["0.80"]},
    "problems": {"throttled_share": 0.25, "tenant": None, "idle_alloc_min": 0.5, "idle_util_max": 0.05,
                 "memory_limit_share": 0.9},
    "tenant_degraded": {"throttled_share": 0.25},
    "gpu_heatmap": {"gpus": slice(1, 5), "bucket": "day"},
    "gpu_slices": {"gpu": None},
    "gpu_slice_hourly": {"gpu": None},
    "idle_reservations": {"min_idle_s": 3600},
    "short_reservations": {"max_life_s": 24 * 3600, "min_idle_share": 0.5},
    "waste_slices": {"limit": 1000},
}
# every query of sql/dashboard/ over a month (the heatmap by day and by hour), the dividend's and
# right-sizing's per-slice figures
MONTH_QUERIES = sorted(
    [f"dashboard/{p.stem}" for p in (store.SQL_DIR / "dashboard").glob("*.sql") if "$start" in p.read_text()]
    + ["dashboard/gpu_heatmap_hourly", "dashboard/months", "chargeback/dividend_groups",
       "chargeback/dividend_coverage", "chargeback/dividend_idle_power", "rightsizing/slices"])


def _varied(path: Path) -> None:
    """What the plain fixture lacks: short-lived pods, a namespace billed to another tenant,
    DRA claims on part of a slice's hours and a DRA driver on a node's GPU rows, usage no NVML
    check covered, GPU-hours without an energy reading, a critical Xid on every GPU in one
    hour, an aggregate ECC counter read on one GPU."""
    con = duckdb.connect(str(path))
    try:
        for source, pod in (("jupyter-alice", "scratch-20261110-18"), ("embed-0", "probe-20261110-18")):
            con.execute("""INSERT INTO slice_hour SELECT * REPLACE (? AS pod, ? AS pod_uid) FROM slice_hour
                           WHERE pod = ? AND hour >= TIMESTAMP '2026-11-10 09:00' AND hour < TIMESTAMP '2026-11-10 15:00'""",
                        [pod, f"uid-{pod}", source])
        cluster, namespace = con.execute(
            "SELECT cluster, namespace FROM slice_hour s JOIN tenants t ON t.api_server = s.cluster "
            "WHERE t.tenant = 'acme' AND namespace IS NOT NULL ORDER BY namespace LIMIT 1").fetchone()
        con.execute("INSERT INTO tenant_namespace_overrides VALUES (?, ?, 'globex')", [cluster, namespace])
        con.execute("UPDATE slice_hour SET claim = 'claim-' || pod, driver = 'gpu.nvidia.com' "
                    "WHERE pod = (SELECT min(pod) FROM slice_hour) AND hour >= TIMESTAMP '2026-11-20'")
        con.execute("UPDATE gpu_hour SET driver = 'gpu.nvidia.com' WHERE node = 'gpu-node-3' "
                    "AND hour >= TIMESTAMP '2026-11-20'")
        con.execute("UPDATE slice_hour SET usage_unverified_s = 1800 WHERE pod = (SELECT max(pod) FROM slice_hour) "
                    "AND hour >= TIMESTAMP '2026-11-07' AND hour < TIMESTAMP '2026-11-09'")
        con.execute("UPDATE gpu_hour SET energy_joules = NULL WHERE node = 'gpu-node-4' AND hour < TIMESTAMP '2026-11-05'")
        con.execute("UPDATE gpu_hour SET xid_events = 1, xid_critical_count = 1, xid_critical_code = 79 "
                    "WHERE hour = TIMESTAMP '2026-11-12 14:00'")
        con.execute("UPDATE gpu_hour SET ecc_agg_first = 5, ecc_agg_last = 5, ecc_agg_max = 5, "
                    "ecc_agg_first_ts_ms = epoch_ms(hour), ecc_agg_last_ts_ms = epoch_ms(hour) + 3599000 "
                    "WHERE gpu_uuid = (SELECT min(gpu_uuid) FROM gpu_hour)")
    finally:
        con.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> tuple[Path, Path]:
    """(the store, a readers' file refreshed from it)."""
    folder = tmp_path_factory.mktemp("days")
    db = build_fleet_db(folder / "fleet.duckdb", "2026-11", earlier=(("2026-10", 3),))
    _varied(db)
    con = store.connect(db)
    try:
        keep_hours(con, datetime(2026, 10, 1), MONTH["end"])   # rollups written directly: keep their money
        reader = ReaderFile(con, folder / "reader.duckdb").refresh()
    finally:
        con.close()
    return db, reader


def _params(name: str, con) -> dict:
    if name == "dashboard/gpu_heatmap_hourly":
        return dict(_params("dashboard/gpu_heatmap", con), bucket="hour")
    params = dict(MONTH, **PARAMS.get(name.split("/")[1], {}))
    if "gpu" in params:
        params["gpu"] = con.execute("SELECT min(gpu_uuid) FROM slice_hour").fetchone()[0]
    if "gpus" in params:   # a page of GPUs, as the GPUs page passes them
        params["gpus"] = [r[0] for r in con.execute("SELECT DISTINCT gpu_uuid FROM gpu_hour ORDER BY 1").fetchall()
                          ][params["gpus"]]
    return params


def _rows(con, name: str) -> list[tuple]:
    sql = store.sql_text(f"{'dashboard/gpu_heatmap' if name == 'dashboard/gpu_heatmap_hourly' else name}.sql")
    return con.execute(sql, {k: v for k, v in _params(name, con).items() if f"${k}" in sql}).fetchall()


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * (1 + abs(b))
    return a == b


def _assert_same_rows(ours: list[tuple], theirs: list[tuple], what: str) -> None:
    assert len(ours) == len(theirs), what
    for x, y in zip(ours, theirs):
        assert len(x) == len(y) and all(_close(a, b) for a, b in zip(x, y)), (what, x, y)


@pytest.mark.parametrize("tenant", [None, "acme", "globex", "initech"])
def test_every_month_query_reads_the_same_from_the_readers_day_figures(files, tenant):
    db, reader = files
    on_store, on_file = store.connect(db, read_only=True), store.connect(reader, read_only=True)
    try:
        assert store.is_reader_file(on_file) and not store.is_reader_file(on_store)
        if tenant:
            scope_connection(on_store, tenant)
            scope_connection(on_file, tenant)
        nonempty = 0
        for name in MONTH_QUERIES:
            ours, theirs = _rows(on_file, name), _rows(on_store, name)
            _assert_same_rows(ours, theirs, f"{name} for {tenant or 'the fleet'}")
            nonempty += bool(ours)
        assert nonempty >= len(MONTH_QUERIES) - 2   # a tenant may have no unassigned rows, no short pods
    finally:
        on_store.close()
        on_file.close()


def test_the_bill_from_the_kept_days_equals_the_bill_from_the_hours(files):
    """The invoice without the unmetered report, which a readers' file computes from its kept
    money summed per day (nothing per GPU-hour: cb_hour_t stays empty), equals the store's
    from its kept hours line for line, for every basis, idle policy and share kind; the DRA
    claims and drivers and the unverified usage included."""
    db, reader = files
    with store.connect(db, read_only=True) as on_store, store.connect(reader, read_only=True) as on_file:
        assert kept_current(on_file, MONTH["start"], MONTH["end"])
        for basis in BASES:
            for idle in IDLE_POLICIES:
                for share in SHARES:
                    ours = compute_bill(on_file, "2026-11", basis, idle, share, unmetered=False)
                    # the usage basis puts the allocation in place of unverified usage, which the
                    # kept days do not keep: that bill reads the hours (chargeback/bill.py month_lines)
                    from_hours = on_file.execute("SELECT count(*) FROM cb_hour_t").fetchone()[0]
                    assert (from_hours > 0) == (basis == "usage"), basis
                    theirs = compute_bill(on_store, "2026-11", basis, idle, share, unmetered=False)
                    assert on_store.execute("SELECT count(*) FROM cb_hour_t").fetchone()[0] > 0
                    assert ours.detail.equals(theirs.detail), (basis, idle, share)
                    assert ours.invoice.equals(theirs.invoice), (basis, idle, share)
                    assert (ours.gpu_cost, ours.total) == (theirs.gpu_cost, theirs.total)
        detail = ours.detail   # the last: max basis, whose lines carry the unverified usage
        claims = detail[detail["claim"] != ""]
        assert set(claims["driver"]) == {"gpu.nvidia.com"} and len(claims) > 0
        assert ((detail["kind"] == "idle") & (detail["driver"] == "gpu.nvidia.com")).any()
        assert (detail["usage_unverified_hours"] > 0).any()


def test_the_readers_file_reads_its_day_figures_not_the_hours(files, tmp_path):
    """The month's pages on a readers' file whose hours were emptied still show the month:
    they read the day figures. Right-sizing's per-slice figures without the slice-hours too
    (its GPUs' model and memory still come from the GPU-hours)."""
    _, reader = files
    copy = tmp_path / "reader-copy.duckdb"
    shutil.copyfile(Path(reader).resolve(), copy)
    with store.connect(copy, read_only=True) as con:
        before = {name: _rows(con, name) for name in ("dashboard/fleet_summary", "rightsizing/slices")}
    assert before["dashboard/fleet_summary"][0][0] > 0 and len(before["rightsizing/slices"]) > 8
    for emptied, name in (("slice_hour", "rightsizing/slices"), ("gpu_hour", "dashboard/fleet_summary")):
        raw = duckdb.connect(str(copy))
        raw.execute(f"DELETE FROM {emptied}")
        raw.close()
        with store.connect(copy, read_only=True) as con:
            assert con.execute(f"SELECT count(*) FROM {emptied}").fetchone()[0] == 0
            _assert_same_rows(_rows(con, name), before[name], f"{name} without {emptied}")


def test_a_refresh_recomputes_the_days_of_the_hours_that_changed(files, tmp_path):
    """Late data for one hour of 3 November, a slice moved to another GPU on 20 November, and a
    lower ECC reading late on 24 November (so the next hour, on another day, shows an
    increase): after an incremental refresh the file's day figures and health events equal
    the store's. Then a higher reading at midnight of 27 November alone: the refresh of that
    day finds the reading before it in the file's GPU-days."""
    db, _ = files
    live_path = tmp_path / "live.duckdb"
    shutil.copyfile(db, live_path)
    con = store.connect(live_path)
    try:
        reader = ReaderFile(con, tmp_path / "reader.duckdb")
        reader.refresh()
        reader.refresh()   # both data files exist: the next refresh copies changed hours only
        with store.transaction(con):
            con.execute("UPDATE gpu_hour SET metered_s = metered_s / 2, sm_util_s = sm_util_s / 2 "
                        "WHERE hour = TIMESTAMP '2026-11-03 07:00'")
            con.execute("UPDATE slice_hour SET gpu_uuid = (SELECT max(gpu_uuid) FROM gpu_hour) "
                        "WHERE hour = TIMESTAMP '2026-11-20 12:00' AND pod = (SELECT min(pod) FROM slice_hour)")
            con.execute("UPDATE gpu_hour SET ecc_agg_first = 3, ecc_agg_last = 3, ecc_agg_max = 3 "
                        "WHERE hour = TIMESTAMP '2026-11-24 23:00' AND gpu_uuid = (SELECT min(gpu_uuid) FROM gpu_hour)")
            con.execute("INSERT INTO reader_changes (hour) VALUES (TIMESTAMP '2026-11-03 07:00'), "
                        "(TIMESTAMP '2026-11-20 12:00'), (TIMESTAMP '2026-11-24 23:00')")
        reader.refresh()
        assert reader.incremental
        with store.connect(reader.dest, read_only=True) as on_file:
            for name in MONTH_QUERIES:
                _assert_same_rows(_rows(on_file, name), _rows(con, name), name)
            ecc = [r for r in _rows(on_file, "dashboard/gpu_events") if "ECC" in r[3]]
            assert [(str(r[0]), r[3]) for r in ecc] == [("2026-11-25 00:00:00", "2 uncorrectable ECC errors")]
            day3 = on_file.execute("SELECT sum(metered_s) FROM reader_gpu_day WHERE day = TIMESTAMP '2026-11-03'"
                                   ).fetchone()[0]
        assert day3 == pytest.approx(con.execute(
            "SELECT sum(metered_s) FROM gpu_hour WHERE hour >= TIMESTAMP '2026-11-03' AND hour < TIMESTAMP '2026-11-04'"
        ).fetchone()[0], rel=1e-12)

        # a higher first reading at midnight of 27 November alone: the refresh that copies only
        # that hour finds the previous reading (26 November's last) in the file's GPU-days
        with store.transaction(con):
            con.execute("UPDATE gpu_hour SET ecc_agg_first = 7, ecc_agg_last = 7, ecc_agg_max = 7 "
                        "WHERE hour = TIMESTAMP '2026-11-27 00:00' AND gpu_uuid = (SELECT min(gpu_uuid) FROM gpu_hour)")
            con.execute("INSERT INTO reader_changes (hour) VALUES (TIMESTAMP '2026-11-27 00:00')")
        reader.refresh()   # the other data file: both changes
        reader.refresh()   # this one: 27 November's hour only
        assert reader.incremental
        with store.connect(reader.dest, read_only=True) as on_file:
            ecc = [r for r in _rows(on_file, "dashboard/gpu_events") if "ECC" in r[3]]
            assert [(str(r[0]), r[3]) for r in ecc] == [("2026-11-27 00:00:00", "2 uncorrectable ECC errors"),
                                                         ("2026-11-25 00:00:00", "2 uncorrectable ECC errors")]
            _assert_same_rows(_rows(on_file, "dashboard/gpu_events"), _rows(con, "dashboard/gpu_events"), "gpu_events")
    finally:
        con.close()
