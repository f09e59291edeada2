"""The operator's two questions, asked in headless Chromium (Debian's) from the Fleet page of
`slicemeter dashboard`: the ten GPUs of one tenant that cost the most paid for but unused,
and every GPU with a critical Xid this month, each reached in at most three interactions.
What the page lists (its table's own CSV download) is checked against SQL on the same store."""
from __future__ import annotations

from datetime import datetime

import pytest

from slicemeter.chargeback.prices import load_prices_or_default
from slicemeter.dashboard import fmt, money
from slicemeter.store import connect, sql_text
from slicemeter.testkit.browser import chromium, fleet_page, gpu_list, serve_dashboard
from slicemeter.testkit.fleet_fixture import add_health_events, build_fleet_db

pytestmark = pytest.mark.browser
MONTH = "2026-11"
NOV = {"start": datetime(2026, 11, 1), "end": datetime(2026, 12, 1)}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """15 nodes, 30 GPUs (acme has 12 of them), with Xids and throttling."""
    tmp = tmp_path_factory.mktemp("browser-filters")
    db = add_health_events(build_fleet_db(tmp / "fleet.duckdb", MONTH, copies=3))
    with serve_dashboard(db, tmp / "dashboard.log") as url:
        yield url, db


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def test_ten_most_wasteful_gpus_of_a_tenant_in_one_click(served, browser, artifacts_dir):
    url, db = served
    page = fleet_page(browser, url)
    page.get_by_role("link", name="acme: most wasteful GPUs").click()              # interaction 1
    rows = gpu_list(page)[:10]
    page.screenshot(path=str(artifacts_dir / "filters-acme-waste.png"), full_page=True)
    assert "tenant=acme" in page.url and "sort=waste_cost" in page.url             # a link to share
    catalog = load_prices_or_default(None)
    con = connect(db, read_only=True)
    try:   # the check bench/bench_browser_8000.py makes at fleet scale, written apart from the page's SQL
        placed = con.execute(sql_text("testkit/oracle_tenant_gpu_waste.sql"), {**NOV, "tenant": "acme"}).fetchall()
    finally:
        con.close()
    cost = {label: money.share_cost(catalog.price(m, n, c), ms) for label, _uuid, m, n, c, ms in placed}
    assert len(cost) == 12 and len(rows) == 10
    assert {r["tenant"] for r in rows} == {"acme"}
    shown = [r["gpu"] for r in rows]
    assert [fmt.money(cost[label], catalog.currency) for label in shown] == [r["waste_cost"] for r in rows]
    assert [cost[label] for label in shown] == sorted(cost.values(), reverse=True)[:10]


def test_every_gpu_with_a_critical_xid_in_one_click(served, browser, artifacts_dir):
    url, db = served
    page = fleet_page(browser, url)
    page.get_by_role("link", name="GPUs with a critical Xid this month").click()   # interaction 1
    rows = gpu_list(page)
    page.screenshot(path=str(artifacts_dir / "filters-xid.png"), full_page=True)
    con = connect(db, read_only=True)
    try:
        want = dict(con.execute(sql_text("testkit/oracle_xid_gpus.sql"), NOV).fetchall())   # label -> UUID
    finally:
        con.close()
    assert len(want) == 2
    assert {r["gpu"] for r in rows} == set(want)
    assert all("critical Xid" in r["health"] for r in rows)
