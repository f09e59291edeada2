"""The operator's two questions, asked in headless Chromium (Debian's) from the Fleet page of
`slicemeter dashboard`: the ten GPUs of one tenant that cost the most paid for but unused,
and every GPU with a critical Xid this month, each reached in at most three interactions.
What the page lists (its table's own CSV download) is checked against SQL on the same store."""
from __future__ import annotations

import pytest

from slicemeter.chargeback.prices import load_prices_or_default
from slicemeter.dashboard import fmt, money
from slicemeter.store import connect
from slicemeter.testkit.browser import chromium, fleet_page, gpu_list, serve_dashboard
from slicemeter.testkit.fleet_fixture import add_health_events, build_fleet_db

pytestmark = pytest.mark.browser
MONTH = "2026-11"
NOV = "s.hour >= TIMESTAMP '2026-11-01' AND s.hour < TIMESTAMP '2026-12-01'"


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


def label_uuids(con) -> dict[str, str]:
    return dict(con.execute("SELECT DISTINCT node || ' · ' || substr(gpu_uuid, 5, 8), gpu_uuid FROM gpu_hour").fetchall())


def test_ten_most_wasteful_gpus_of_a_tenant_in_one_click(served, browser, artifacts_dir):
    url, db = served
    page = fleet_page(browser, url)
    page.get_by_role("link", name="acme: most wasteful GPUs").click()              # interaction 1
    rows = gpu_list(page)[:10]
    page.screenshot(path=str(artifacts_dir / "filters-acme-waste.png"), full_page=True)
    assert "tenant=acme" in page.url and "sort=waste_cost" in page.url             # a link to share
    catalog = load_prices_or_default(None)
    con = connect(db, read_only=True)
    try:
        labels = label_uuids(con)
        per_gpu = con.execute(f"""SELECT s.gpu_uuid, g.model, s.node, s.cluster,
                   sum(round(greatest(s.alloc_dominant_share_s - s.usage_share_s, 0) * 1000))::BIGINT
            FROM slice_hour s JOIN (SELECT DISTINCT gpu_uuid, model FROM gpu_hour) g USING (gpu_uuid)
            JOIN tenants t ON t.api_server = s.cluster
            WHERE t.tenant = 'acme' AND {NOV} GROUP BY ALL""").fetchall()
    finally:
        con.close()
    cost = {u: money.share_cost(catalog.price(m, n, c), ms) for u, m, n, c, ms in per_gpu}
    assert len(cost) == 12 and len(rows) == 10
    assert {r["tenant"] for r in rows} == {"acme"}
    shown = [labels[r["gpu"]] for r in rows]
    assert [fmt.money(cost[u], catalog.currency) for u in shown] == [r["waste_cost"] for r in rows]
    assert [cost[u] for u in shown] == sorted(cost.values(), reverse=True)[:10]


def test_every_gpu_with_a_critical_xid_in_one_click(served, browser, artifacts_dir):
    url, db = served
    page = fleet_page(browser, url)
    page.get_by_role("link", name="GPUs with a critical Xid this month").click()   # interaction 1
    rows = gpu_list(page)
    page.screenshot(path=str(artifacts_dir / "filters-xid.png"), full_page=True)
    con = connect(db, read_only=True)
    try:
        labels = label_uuids(con)
        want = {r[0] for r in con.execute("""SELECT DISTINCT gpu_uuid FROM gpu_hour WHERE xid_critical_count > 0
            AND hour >= TIMESTAMP '2026-11-01' AND hour < TIMESTAMP '2026-12-01'""").fetchall()}
    finally:
        con.close()
    assert len(want) == 2
    assert {labels[r["gpu"]] for r in rows} == want
    assert all("critical Xid" in r["health"] for r in rows)
