"""The live bill: budgets in the tenant catalog, the forecast, ingest's figures, the Tenants page.

A real Prometheus firing the budget alert: tests/test_budget_alert_live.py.
"""
from __future__ import annotations

import subprocess
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction

import pytest
import yaml

from slicemeter import clock
from slicemeter.chargeback.live_bill import DAY_S, MonthMoney, budgets, forecast, live_bill, month_seconds
from slicemeter.chargeback.prices import parse_prices
from slicemeter.ingest import tenants
from slicemeter.ingest.headlines import LiveBillRefresher
from slicemeter.ingest.metrics import LiveBillHeadline
from slicemeter.testkit.cb_rows import A100, ACME, GLOBEX, add_gpu, add_slice, open_store
from slicemeter.testkit.dashboard_app import run_app
from slicemeter.testkit.ingest_helpers import SLICEMETER

PRICES = parse_prices({"currency": "EUR", "gpu_hour": {A100: "2.40"}})
MONTH_S = 30 * DAY_S
CATALOG = {"tenants": [{"name": "acme", "api_server": ACME, "monthly_budget": "850.00"},
                       {"name": "globex", "api_server": GLOBEX, "monthly_budget": "300"},
                       {"name": "initech", "api_server": "https://initech.example:6443"}]}


# --- the forecast (pure) ---------------------------------------------------------------------

def test_forecast_is_month_to_date_plus_the_mean_rate_over_the_rest_of_the_month():
    # 10 days of $10 a day, a third of the month: $300 by its end
    assert forecast(MonthMoney(Decimal("100.00"), Decimal("100.00")), 10 * DAY_S, MONTH_S) == Decimal("300.00")
    # a correction of a closed month is this invoice's money, not a rate: added once
    assert forecast(MonthMoney(Decimal("95.00"), Decimal("100.00")), 10 * DAY_S, MONTH_S) == Decimal("295.00")
    # rounded half up to the cent once: $1 over 7 days, 3 days left -> 1 + 3/7 = 1.428571...
    assert forecast(MonthMoney(Decimal("1.00"), Decimal("1.00")), 7 * DAY_S, 10 * DAY_S) == Decimal("1.43")


def test_forecast_of_a_month_that_is_over_is_its_money():
    assert forecast(MonthMoney(Decimal("812.34"), Decimal("800.00")), MONTH_S, MONTH_S) == Decimal("812.34")


def test_first_day_fills_what_it_has_not_seen_at_the_previous_months_rate():
    last_month = Fraction(Decimal("3100.00")) / (31 * DAY_S)     # $100 a day
    # at midnight on the 1st: the previous month's rate over the whole month
    assert forecast(MonthMoney(), 0, MONTH_S, last_month) == Decimal("3000.00")
    # 6 h in at twice the old rate ($50): the day is 50 + 75, and 29.75 days are left
    assert forecast(MonthMoney(Decimal("50.00"), Decimal("50.00")), DAY_S // 4, MONTH_S, last_month) == \
        Decimal("50.00") + Decimal("125.00") * Decimal("29.75")
    # a tenant new this month is not extrapolated from its first minute: $1 a day, not a minute
    assert forecast(MonthMoney(Decimal("1.00"), Decimal("1.00")), 60, MONTH_S) == Decimal("31.00")
    # from the second day on, only this month's hours count
    assert forecast(MonthMoney(Decimal("200.00"), Decimal("200.00")), DAY_S, MONTH_S, last_month) == Decimal("6000.00")


def test_month_seconds_clamp_to_the_month():
    at = datetime(2026, 2, 3, 12, tzinfo=timezone.utc)
    assert month_seconds("2026-02", at) == (2 * DAY_S + DAY_S // 2, 28 * DAY_S)
    assert month_seconds("2026-01", at) == (31 * DAY_S, 31 * DAY_S)
    assert month_seconds("2026-03", at) == (0, 31 * DAY_S)


# --- budgets in the tenant catalog -----------------------------------------------------------

@pytest.mark.parametrize("budget, message", [
    (1750.5, "tenants[0].monthly_budget: write the amount as a quoted string (got float 1750.5, which is inexact)"),
    ("-5", "tenants[0].monthly_budget: must be a finite number >= 0, got '-5'"),
    ("12.3456789", "tenants[0].monthly_budget: at most 6 decimals"),
    ("lots", "tenants[0].monthly_budget: not a decimal number: 'lots'"),
])
def test_a_bad_budget_stops_ingest_naming_file_line_and_key(tmp_path, budget, message):
    path = tmp_path / "tenants.yaml"
    path.write_text(f"tenants:\n  - name: acme\n    api_server: {ACME}\n    monthly_budget: {yaml.safe_dump(budget).split()[0]}\n")
    db = tmp_path / "s.duckdb"
    proc = subprocess.run([*SLICEMETER, "ingest", "--kafka", "127.0.0.1:1", "--db", str(db), "--tenants", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:4: {message}" in proc.stderr


def test_budgets_are_stored_exactly_and_survive_a_kamaji_merge(tmp_path):
    path = tmp_path / "tenants.yaml"
    path.write_text(yaml.safe_dump({"tenants": [{**CATALOG["tenants"][0], "kamaji": {"namespace": "t-acme", "name": "acme"}},
                                                *CATALOG["tenants"][1:]]}))
    catalog = tenants.load_catalog(path)
    imported = [tenants.Tenant(name="acme", tcp_namespace="t-acme", tcp_name="acme", source="kamaji-api",
                               api_server="https://10.0.0.7:6443")]
    merged = tenants.merge(catalog, imported)
    assert {t.name: t.monthly_budget for t in merged.tenants} == \
        {"acme": Decimal("850.00"), "globex": Decimal("300"), "initech": None}
    with open_store(tmp_path / "s.duckdb", fill=lambda con: None) as con:
        tenants.store_catalog(con, merged)
        assert budgets(con) == {"acme": Decimal("850"), "globex": Decimal("300")}
        assert {t.name: t.monthly_budget for t in tenants.stored_tenants(con)}["acme"] == Decimal("850")


# --- month-to-date and forecast from a store -------------------------------------------------

def fill_half_november(con) -> None:
    """acme: a whole A100 every hour of Nov 1-15 ($57.60 a day); globex: a quarter of one."""
    tenants.store_catalog(con, tenants.parse_catalog(CATALOG))
    for h in range(15 * 24):
        hour = (datetime(2026, 11, 1) + timedelta(hours=h)).isoformat(sep=" ")
        add_gpu(con, hour=hour, gpu="GPU-a", cluster=ACME)
        add_slice(con, "trainer", 1.0, hour=hour, gpu="GPU-a", cluster=ACME)
        add_gpu(con, hour=hour, gpu="GPU-g", node="gpu-node-2", cluster=GLOBEX)
        add_slice(con, "notebook", 0.25, hour=hour, gpu="GPU-g", node="gpu-node-2", cluster=GLOBEX)


MID_NOVEMBER = datetime(2026, 11, 16, tzinfo=timezone.utc)


def test_live_bill_of_a_store_mid_month(tmp_path):
    with open_store(tmp_path / "s.duckdb", fill=fill_half_november) as con:
        rows = live_bill(con, MID_NOVEMBER, ("allocation", "usage"), "platform", PRICES, tuple(budgets(con)) + ("initech",))
    got = {(r.tenant, r.basis): (r.month_to_date, r.forecast, r.currency) for r in rows}
    for basis in ("allocation", "usage"):
        assert got["acme", basis] == (Decimal("864.00"), Decimal("1728.00"), "EUR")
        assert got["globex", basis] == (Decimal("216.00"), Decimal("432.00"), "EUR")
        assert got["platform", basis] == (Decimal("648.00"), Decimal("1296.00"), "EUR")   # globex's idle 3/4
        assert got["initech", basis] == (Decimal("0.00"), Decimal("0.00"), "EUR")          # nothing yet, still served


def test_ingest_serves_the_live_bill_and_budgets(tmp_path):
    snapshot = tmp_path / "snapshot.duckdb"
    with open_store(snapshot, fill=fill_half_november):
        pass
    served = LiveBillHeadline()
    assert list(served.collect()) == []           # nothing made up before the first refresh
    refresher = LiveBillRefresher(snapshot, 60, served, PRICES, ("allocation", "max"), "shared", now=lambda: MID_NOVEMBER)
    assert refresher.refresh()
    found = {(f.name, tuple(sorted(s.labels.items()))): s.value for f in served.collect() for s in f.samples}
    acme = (("basis", "max"), ("currency", "EUR"), ("tenant", "acme"))
    # idle shared: globex's GPU's idle ($648) goes to acme and globex 4:1, as their charges
    assert found["slicemeter_tenant_month_to_date_charge", acme] == 864.0 + 518.4
    assert found["slicemeter_tenant_month_forecast_charge", acme] == 2 * (864.0 + 518.4)
    globex = (("basis", "allocation"), ("currency", "EUR"), ("tenant", "globex"))
    assert found["slicemeter_tenant_month_to_date_charge", globex] == 216.0 + 129.6
    budget = {k[1]: v for k, v in found.items() if k[0] == "slicemeter_tenant_month_budget"}
    assert budget == {(("currency", "EUR"), ("tenant", "acme")): 850.0,
                      (("currency", "EUR"), ("tenant", "globex")): 300.0}


def test_bill_interval_needs_a_snapshot_and_a_metrics_port(tmp_path):
    proc = subprocess.run([*SLICEMETER, "ingest", "--kafka", "127.0.0.1:1", "--db", str(tmp_path / "s.duckdb"),
                           "--bill-interval", "60", "--metrics-port", "0"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "--bill-interval needs --snapshot" in proc.stderr


# --- the Tenants page ------------------------------------------------------------------------

def cost_table(at):
    (frame,) = [d.value for d in at.dataframe if "forecast_text" in d.value.columns]
    return {r.tenant: (r.cost_text, r.forecast_text, r.budget_text) for r in frame.itertuples()}


def budget_warnings(at) -> list[str]:
    return [w.body for w in at.warning if "budget" in w.body]


def test_tenants_page_shows_budget_month_to_date_and_forecast(tmp_path, monkeypatch):
    db = tmp_path / "s.duckdb"
    with open_store(db, fill=fill_half_november):
        pass
    monkeypatch.setattr(clock, "now", lambda: MID_NOVEMBER)   # the pretend clock would run on
    at = run_app(db, monkeypatch, "tenants")
    assert cost_table(at) == {"acme": ("$864.00", "$1,728.00", "$850.00"),
                              "globex": ("$216.00", "$432.00", "$300.00"),
                              "platform": ("$648.00", "$1,296.00", "")}
    assert budget_warnings(at) == ["Over the monthly budget: acme ($864.00 of $850.00)",
                                   "Heading over the monthly budget by the month's end: globex (forecast $432.00 of $300.00)"]
    monkeypatch.setattr(clock, "now", lambda: datetime(2026, 12, 3, tzinfo=timezone.utc))   # the month is over
    at = run_app(db, monkeypatch, "tenants")
    assert cost_table(at)["globex"] == ("$216.00", "$216.00", "$300.00")
    assert budget_warnings(at) == ["Over the monthly budget: acme ($864.00 of $850.00)"]
