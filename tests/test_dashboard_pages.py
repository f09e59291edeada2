"""AppTest of every dashboard page: the figures shown equal SQL computed here, independently
of sql/dashboard/, on a real DuckDB file (testkit/fleet_fixture.py)."""
from __future__ import annotations

import importlib.util
import shutil
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
import yaml
from streamlit.testing.v1 import AppTest

from slicemeter.dashboard import fmt
from slicemeter.testkit.dashboard_app import metric, run_app
from slicemeter.testkit.fleet_fixture import build_fleet_db

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
MONTH = "2026-11"


def nov(alias: str = "") -> str:
    return f"{alias}hour >= TIMESTAMP '2026-11-01' AND {alias}hour < TIMESTAMP '2026-12-01'"


NOV = nov()


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory) -> Path:
    return build_fleet_db(tmp_path_factory.mktemp("dash") / "fleet.duckdb", MONTH, earlier=(("2026-10", 3),))


@pytest.fixture
def raw(fleet_db):
    """A plain DuckDB connection without slicemeter's views: the independent reference."""
    con = duckdb.connect(str(fleet_db), read_only=True)
    yield con
    con.close()


def one(con, sql, params=None):
    return con.execute(sql, params or []).fetchone()[0]


app = run_app


def table_by_title(at: AppTest, column: str):
    frames = [d.value for d in at.dataframe if column in d.value.columns]
    assert frames, f"no table with column {column!r}"
    return frames


def test_fleet_figures_equal_independent_sql(fleet_db, raw, monkeypatch):
    at = app(fleet_db, monkeypatch)
    util = one(raw, f"SELECT sum(sm_util_s) / sum(metered_s) FROM gpu_hour WHERE {NOV}")
    # allocation capped per GPU-hour at the metered time (oversubscription never exceeds capacity)
    alloc = one(raw, f"""SELECT sum(least(a, m)) / sum(m) FROM (
        SELECT g.metered_s m, coalesce(sum(s.alloc_dominant_share_s), 0) a FROM gpu_hour g
        LEFT JOIN slice_hour s ON s.hour = g.hour AND s.gpu_uuid = g.gpu_uuid
        WHERE {nov('g.')} GROUP BY g.hour, g.gpu_uuid, g.metered_s)""")
    per_gpu = one(raw, f"SELECT (SELECT count(*) FROM slice_hour WHERE {NOV}) / count(*) FROM gpu_hour WHERE {NOV}")
    capacity = one(raw, f"SELECT sum(metered_s) / 3600 FROM gpu_hour WHERE {NOV}")
    assert 0.2 < util < 0.4  # the fixture's fleet sits near the industry's figure
    assert metric(at, "Fleet utilization") == fmt.pct(util)
    assert metric(at, "Allocated") == fmt.pct(alloc)
    assert metric(at, "Slices per GPU") == f"{per_gpu:.2f}"
    assert metric(at, "Capacity") == f"{capacity:,.0f}"
    assert metric(at, "GPUs") == "10 · 5 · 3"
    # the diurnal services grow through the month: the 7-day trend is up
    assert next(m for m in at.metric if m.label == "Fleet utilization").delta.startswith("+")
    # per-tenant table: names and utilization from the catalog join done here
    table = at.table[0].value
    rows = raw.execute(f"""SELECT t.tenant, t.display_name, sum(g.sm_util_s) / sum(g.metered_s)
        FROM gpu_hour g JOIN tenants t ON t.api_server = g.cluster WHERE {nov('g.')} GROUP BY ALL""").fetchall()
    assert len(rows) == 3
    for tenant, name, u in rows:
        assert table.loc[tenant, "name"] == name
        assert table.loc[tenant, "utilization"] == fmt.pct(u)


def test_fleet_headline_is_the_sharing_dividend_and_the_months_cost(fleet_db, raw, monkeypatch):
    at = app(fleet_db, monkeypatch)
    assert at.metric[0].label == "Users on the same hardware"      # the page's headline
    whole, in_use = raw.execute(f"""SELECT sum(s.m), sum(g.metered_s) FROM gpu_hour g JOIN (
        SELECT hour, gpu_uuid, sum(metered_s) m FROM slice_hour WHERE {NOV} GROUP BY ALL) s USING (hour, gpu_uuid)
        WHERE {nov('g.')}""").fetchone()
    assert metric(at, "Users on the same hardware") == f"{whole / in_use:.1f}x"
    hours = one(raw, f"SELECT count(DISTINCT hour) FROM gpu_hour WHERE {NOV}")
    assert metric(at, "Avoided GPUs") == f"{(whole - in_use) / 3600 / hours:.1f}"
    from slicemeter.chargeback.bill import compute_bill
    from slicemeter.store import connect
    con = connect(fleet_db, read_only=True)
    try:
        bill = compute_bill(con, MONTH)
    finally:
        con.close()
    # tenant charges plus idle: every metered GPU-hour at its catalog price, as chargeback has it
    assert metric(at, "GPU cost (month to date)") == fmt.money(bill.gpu_cost)


def test_fleet_month_switch_and_new_data_invalidate_cache(fleet_db, raw, monkeypatch, tmp_path):
    at = app(fleet_db, monkeypatch)
    at.sidebar.selectbox[0].set_value("2026-10").run()
    oct_capacity = one(raw, "SELECT sum(metered_s) / 3600 FROM gpu_hour WHERE hour < TIMESTAMP '2026-11-01'")
    assert metric(at, "Capacity") == f"{oct_capacity:,.0f}"
    assert oct_capacity < 1000  # three days, not the month

    # new data lands in a copy (as ingest's snapshot replaces the file): the next run shows it
    copy = build_fleet_db(tmp_path / "grow.duckdb", MONTH, days=2)
    at2 = app(copy, monkeypatch)
    before = metric(at2, "Capacity")
    con = duckdb.connect(str(copy))
    con.execute("""INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s,
                   sample_count, sm_util_s, memory_used_byte_s, energy_joules) SELECT hour, cluster, node, 'GPU-new-' || gpu_uuid, model,
                   memory_total_bytes, metered_s, sample_count, sm_util_s, memory_used_byte_s, energy_joules
                   FROM gpu_hour""")
    con.close()
    at2.run()
    assert metric(at2, "Capacity") != before
    assert metric(at2, "GPUs") == "20 · 5 · 3"


def test_tenants_gpu_hours_equal_independent_sql(fleet_db, raw, monkeypatch):
    at = app(fleet_db, monkeypatch, "tenants")
    expected = dict(raw.execute(f"""SELECT t.tenant, sum(s.alloc_dominant_share_s) / 3600 FROM slice_hour s
        JOIN tenants t ON t.api_server = s.cluster WHERE {nov('s.')} GROUP BY t.tenant""").fetchall())
    used = dict(raw.execute(f"""SELECT t.tenant, sum(s.usage_share_s) / 3600 FROM slice_hour s
        JOIN tenants t ON t.api_server = s.cluster WHERE {nov('s.')} GROUP BY t.tenant""").fetchall())
    shown = next(f for f in table_by_title(at, "slices") if "namespace" not in f.columns)
    assert set(shown["tenant"]) == set(expected) == {"acme", "globex", "initech"}
    for _, row in shown.iterrows():
        assert row["allocated_gpu_h"] == pytest.approx(expected[row["tenant"]], rel=1e-9)
        assert row["used_gpu_h"] == pytest.approx(used[row["tenant"]], rel=1e-9)
    by_ns = next(f for f in table_by_title(at, "namespace") if "allocated_gpu_h" in f.columns)
    ns = dict(raw.execute(f"""SELECT namespace, sum(alloc_dominant_share_s) / 3600 FROM slice_hour
        WHERE {NOV} GROUP BY namespace""").fetchall())
    assert dict(zip(by_ns["namespace"], by_ns["allocated_gpu_h"])) == pytest.approx(ns)


def test_tenants_costs_come_from_chargeback(fleet_db, monkeypatch):
    """Costs are slicemeter.chargeback.bill's (the exports' code); where that module is not installed
    the page says so instead of inventing money."""
    at = app(fleet_db, monkeypatch, "tenants")
    if importlib.util.find_spec("slicemeter.chargeback.bill") is None:
        assert any("chargeback module not installed" in w.body for w in at.warning)
        assert not [m for m in at.metric if m.label.startswith("Total")]
        return
    from slicemeter.dashboard import money
    from slicemeter.chargeback.bill import chargeback
    from slicemeter.store import connect

    for basis, idle in (("allocation", "platform"), ("usage", "shared")):
        at.radio(key="basis").set_value(basis)
        at.radio(key="idle").set_value(idle)
        at.run()
        assert not at.exception, at.exception
        con = connect(fleet_db, read_only=True)
        bill = chargeback(con, MONTH, basis=basis, idle=idle)
        con.close()
        total = sum(bill["cost"], Decimal(0))
        assert total > 0
        assert metric(at, "Total") == fmt.money(total, money.currency(bill))


def test_gpus_heatmap_list_and_slices_equal_independent_sql(fleet_db, raw, monkeypatch):
    at = app(fleet_db, monkeypatch, "gpus")
    gpus = next(f for f in table_by_title(at, "utilization"))
    expected = dict(raw.execute(f"""SELECT gpu_uuid, sum(sm_util_s) / sum(metered_s) FROM gpu_hour
        WHERE {NOV} GROUP BY gpu_uuid""").fetchall())
    assert len(gpus) == len(expected) == 10
    assert at.get("arrow_vega_lite_chart") or at.get("vega_lite_chart")  # the heatmap is drawn
    # pick the GPU shared by four 25 % inference pods
    target = raw.execute("SELECT gpu_uuid FROM slice_hour WHERE pod = 'embed-0' LIMIT 1").fetchone()[0]
    label = next(lbl for lbl in at.selectbox(key="gpu_pick").options if target[4:12] in lbl)
    at.selectbox(key="gpu_pick").set_value(label).run()
    assert not at.exception
    assert metric(at, "SM utilization") == fmt.pct(expected[target])
    slices = next(f for f in table_by_title(at, "pod"))
    pods = {r[0] for r in raw.execute(f"SELECT DISTINCT pod FROM slice_hour WHERE gpu_uuid = ? AND {NOV}", [target]).fetchall()}
    assert set(slices["pod"]) == pods == {"embed-0", "embed-1", "embed-2", "embed-3"}
    used = one(raw, f"SELECT sum(usage_share_s) / 3600 FROM slice_hour WHERE pod = 'embed-0' AND {NOV}")
    assert slices.set_index("pod").loc["embed-0", "used_gpu_h"] == pytest.approx(used)


def test_waste_figures_equal_independent_sql(fleet_db, raw, monkeypatch):
    at = app(fleet_db, monkeypatch, "waste")
    waste = next(f for f in table_by_title(at, "unused_gpu_h"))
    ref = raw.execute(f"""SELECT pod, sum(greatest(alloc_dominant_share_s - usage_share_s, 0)) / 3600 AS w
        FROM slice_hour WHERE {NOV} GROUP BY pod_uid, container, pod ORDER BY w DESC LIMIT 10""").fetchall()
    assert list(waste["pod"]) == [r[0] for r in ref]
    assert list(waste["unused_gpu_h"]) == pytest.approx([r[1] for r in ref])
    assert waste["pod"].iloc[0] == "reserved-gpu"   # the whole GPU held by `sleep`
    total = one(raw, f"SELECT sum(greatest(alloc_dominant_share_s - usage_share_s, 0)) / 3600 FROM slice_hour WHERE {NOV}")
    assert metric(at, "Allocated but unused") == fmt.gpu_hours(total)
    if importlib.util.find_spec("slicemeter.chargeback.bill") is not None:   # the money view of the same waste
        from slicemeter.dashboard import money
        from slicemeter.chargeback.bill import chargeback
        from slicemeter.store import connect

        con = connect(fleet_db, read_only=True)
        bill = chargeback(con, MONTH, basis="allocation", idle="platform")
        con.close()
        assert metric(at, "Paid for, not used") == fmt.money(sum(bill["waste"], Decimal(0)), money.currency(bill))

    idle = next(f for f in table_by_title(at, "never_ran_kernel"))
    last = one(raw, f"SELECT max(hour) FROM slice_hour WHERE {NOV}")
    idle_ref = {r[0] for r in raw.execute(
        "SELECT pod FROM slice_hour WHERE hour = ? AND (last_kernel_age_s IS NULL OR last_kernel_age_s >= 4 * 3600)",
        [last]).fetchall()}
    assert set(idle["pod"]) == idle_ref and {"reserved-gpu", "jupyter-alice", "eval-job"} <= idle_ref
    at.slider(key="idle_hours").set_value(24).run()
    idle24 = next(f for f in table_by_title(at, "never_ran_kernel"))
    assert set(idle24["pod"]) == {"reserved-gpu", "jupyter-alice", "eval-job"}  # the batch slept 18 h

    kwh = one(raw, f"SELECT sum(energy_joules) / 3.6e6 FROM gpu_hour WHERE {NOV}")
    assert metric(at, "Energy") == f"{kwh:,.1f} kWh"
    at.number_input(key="carbon").set_value(500.0).run()
    assert metric(at, "Emissions") == f"{kwh * 500 / 1000:,.1f} kgCO2e"


def with_short_lived_pods(fleet_db: Path, path: Path) -> Path:
    """The fleet plus two pods that lived six hours on 10 November: a slice reserved and left
    idle (a copy of jupyter-alice's idle slice) and a busy one (a copy of embed-0's)."""
    shutil.copy(fleet_db, path)
    con = duckdb.connect(str(path))
    for source, pod in (("jupyter-alice", "scratch-20261110-18"), ("embed-0", "probe-20261110-18")):
        con.execute("""INSERT INTO slice_hour SELECT * REPLACE (? AS pod, ? AS pod_uid) FROM slice_hour
                       WHERE pod = ? AND hour >= TIMESTAMP '2026-11-10 09:00' AND hour < TIMESTAMP '2026-11-10 15:00'""",
                    [pod, f"uid-{pod}", source])
    con.close()
    return path


def test_waste_lists_short_lived_idle_reservations_with_their_cost(fleet_db, monkeypatch, tmp_path):
    at = app(with_short_lived_pods(fleet_db, tmp_path / "short.duckdb"), monkeypatch, "waste")
    short = next(f for f in table_by_title(at, "lived_h"))
    # the idle six hours are listed; the busy six hours and the month-long reservations are not
    assert list(short["pod"]) == ["scratch-20261110-18"]
    row = short.iloc[0]
    assert (row["reserved_h"], row["idle_h"]) == (6.0, 6.0) and row["lived_h"] < 24
    assert row["allocated_gpu_h"] == pytest.approx(6 * 0.25)
    a100 = Decimal(yaml.safe_load((Path(APP).parent.parent / "examples" / "prices.yaml").read_text())
                   ["gpu_hour"]["NVIDIA A100-SXM4-80GB"])
    assert row["cost"] == fmt.money(a100 * 6 * Decimal("0.25"))
    assert metric(at, "Short-lived idle reservations") == "1"
    assert metric(at, "Their cost") == fmt.money(a100 * 6 * Decimal("0.25"))


def test_exports_page_serves_the_cli_files(fleet_db, monkeypatch):
    at = app(fleet_db, monkeypatch, "exports")
    assert not at.get("download_button")          # built on request only
    at.button(key="export_build").click().run()
    if importlib.util.find_spec("slicemeter.chargeback.exports") is None:
        assert any("slicemeter.chargeback.exports module not installed" in w.body for w in at.warning)
        return
    assert not at.error, [e.body for e in at.error]
    labels = [b.proto.label for b in at.get("download_button")]
    assert any(".csv" in lbl for lbl in labels), labels
    assert any("focus" in lbl.lower() for lbl in labels), labels


def test_right_sizing_page(fleet_db, monkeypatch):
    at = app(fleet_db, monkeypatch, "right_sizing")
    if importlib.util.find_spec("slicemeter.dashboard.right_sizing") is None:
        assert any("right_sizing module not installed" in w.body for w in at.warning)
    else:  # recommend's page rendered inside this app, on this month's data
        assert [t.value for t in at.title] == ["Right-sizing"]
        assert metric(at, "GPUs freeable").endswith("of 10")
        assert metric(at, "Monthly saving").startswith("$")   # money reads alike on every page


def test_tenants_cost_table_gives_the_idle_line_numbers_not_none(fleet_db, monkeypatch):
    at = app(fleet_db, monkeypatch, "tenants")
    costs = table_by_title(at, "cost_text")[0]
    idle = costs[costs["tenant"] == "platform"]
    assert len(idle) == 1
    assert idle[["allocated_gpu_h", "used_gpu_h"]].values.tolist() == [[0.0, 0.0]]


def test_tenants_trend_leaves_out_the_day_still_running(fleet_db, monkeypatch):
    monkeypatch.setenv("SLICEMETER_NOW", "2026-11-15T12:00Z")
    at = app(fleet_db, monkeypatch, "tenants")
    assert any("2026-11-15 (UTC) is still running" in c.value for c in at.caption)
    monkeypatch.setenv("SLICEMETER_NOW", "2026-12-02T00:00Z")   # the month is over: every day drawn
    at = app(fleet_db, monkeypatch, "tenants")
    assert not any("still running" in c.value for c in at.caption)


def test_no_database_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("SLICEMETER_DB", str(tmp_path / "missing.duckdb"))
    at = AppTest.from_file(APP, default_timeout=30).run()
    assert not at.exception
    assert any("database file not found" in e.body for e in at.error)


def heatmap_rows(at: AppTest):
    """The heatmap's y-axis order and its data rows (gpu, day, utilization) as drawn."""
    import json

    import pyarrow as pa

    chart = next(e for e in at.get("vega_lite_chart") + at.get("arrow_vega_lite_chart")
                 if json.loads(e.proto.spec).get("mark", {}).get("type") == "rect")
    spec = json.loads(chart.proto.spec)
    blob = chart.proto.datasets[0].data.data if chart.proto.datasets else chart.proto.data.data
    table = pa.ipc.open_stream(blob).read_all().to_pandas()
    return spec["encoding"]["y"]["sort"], table


def test_gpus_heatmap_pages_through_a_large_fleet(tmp_path, monkeypatch):
    """50 GPUs: the heatmap draws one page of 40 by day, the second page the other 10, in the
    natural order of their nodes (gpu-node-2 before gpu-node-10), each with the month's per-GPU
    daily figures computed here."""
    db = build_fleet_db(tmp_path / "fleet5.duckdb", MONTH, days=3, copies=5)
    at = app(db, monkeypatch, "gpus")
    con = duckdb.connect(str(db), read_only=True)
    gpus = sorted(con.execute(f"SELECT DISTINCT node, gpu_uuid FROM gpu_hour WHERE {NOV}").fetchall(),
                  key=lambda r: (int(r[0].rsplit("-", 1)[1]), r[1]))
    assert len(gpus) == 50
    labels = [f"{n} · {u[4:12]}" for n, u in gpus]
    order, rows = heatmap_rows(at)
    assert order == labels[:40] and set(rows["gpu"]) == set(labels[:40])
    at.number_input(key="gpu_page").set_value(2).run()
    assert not at.exception, at.exception
    order, rows = heatmap_rows(at)
    assert order == labels[40:] and set(rows["gpu"]) == set(labels[40:])
    node, uuid = gpus[45]
    want = con.execute(f"""SELECT date_trunc('day', hour), sum(sm_util_s) / sum(metered_s) FROM gpu_hour
        WHERE gpu_uuid = ? AND node = ? AND {NOV} GROUP BY 1 ORDER BY 1""", [uuid, node]).fetchall()
    con.close()
    got = rows[rows["gpu"] == labels[45]].sort_values("bucket")
    assert len(got) == len(want) == 3
    assert got["utilization"].tolist() == pytest.approx([u for _, u in want])


def test_every_table_names_its_columns_and_writes_numbers_one_way(fleet_db, monkeypatch):
    """No table shows a raw column name (snake_case) or a number format without thousands
    separators (common.number_col), on any page."""
    import json

    at = app(fleet_db, monkeypatch)
    seen = 0
    for page in sorted(p.stem for p in (Path(APP).parent / "views").glob("*.py")):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, at.exception)
        for table in at.dataframe:
            config = json.loads(table.proto.columns or "{}")
            for column in table.value.columns:
                c = config.get(f"col:name:{column}") or config.get(column) or {}
                assert "_" not in column or c.get("label"), (page, column)
                number = (c.get("type_config") or {}).get("format") or ""
                percent = number.endswith(" %%")   # a share: never near a thousand
                assert "%" not in number or percent or "%," in number, (page, column, number)
                seen += 1
    assert seen > 50
