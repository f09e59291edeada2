"""Two tenants' users and a platform user signed in to one dashboard server, each in a real
headless Chromium, opening every page one after another in either order: each sees its own
figures and names only, cached results and error messages included.

The server's caches are shared by every session, so a result cached for one user and served
to the next is what these tests would see; the websocket frames are searched too, since
canvas tables carry no text in the page."""
from __future__ import annotations

import pytest

from slicemeter.chargeback.dividend import dividend
from slicemeter.chargeback.prices import load_prices
from slicemeter.dashboard import data, fmt
from slicemeter.testkit.browser import serve_dashboard
from slicemeter.testkit.fleet_fixture import NODES, SLICES, TENANTS
# the fixture fleet and one Chromium for the module, as the single-tenant browser tests have them
from test_dashboard_browser_access import PAGES, browser, fleet_db, record_frames, visit_every_page  # noqa: F401

pytestmark = pytest.mark.browser
MONTH = "2026-11"
ACCESS = "groups:\n  acme-finops: [acme]\n  globex-finops: [globex]\n  platform-ops: '*'\n"
GROUPS = {"acme": "acme-finops", "globex": "globex-finops", None: "platform-ops"}


def names_of(tenant: str) -> set[str]:
    """What names `tenant` on a page: its id, display name, cluster, cost centre, nodes, pods."""
    (row,) = [r for r in TENANTS if r[0] == tenant]
    nodes = {n for n, (t, _m) in NODES.items() if t == tenant}
    return {*row, *nodes} | {s.pod for n in nodes for s in SLICES[n]}


def others_of(tenant: str | None) -> set[str]:
    return set() if tenant is None else {w for t, *_ in TENANTS if t != tenant for w in names_of(t)}


def who(tenant: str | None) -> str:
    return tenant or "platform"


def gpu_costs(db, prices) -> dict[str | None, str]:
    """Each scope's "GPU cost (month to date)" as the dividend computes it on its own rows."""
    out = {}
    for tenant in GROUPS:
        with data.open_db(db, tenant) as con:
            fleet = dividend(con, MONTH, load_prices(prices)).fleet
        out[tenant] = fmt.money(fleet.gpu_cost, fleet.currency)
    return out


def signed_in_page(browser, tenant: str | None):
    context = browser.new_context(viewport={"width": 1440, "height": 1500}, extra_http_headers={
        "X-Forwarded-Email": f"user@{who(tenant)}.example", "X-Forwarded-Groups": GROUPS[tenant]})
    return context, context.new_page()


# every page, and what shows that it has rendered to its end, whoever the user is
EVERY_PAGE = [(path, [m for m in markers if "tenant acme" not in m]) for path, markers in PAGES]


def visit_as(browser, url: str, tenant: str | None, artifacts_dir, name: str) -> dict[str, str]:
    context, page = signed_in_page(browser, tenant)
    try:
        return visit_every_page(page, url, artifacts_dir, name, EVERY_PAGE)
    finally:
        context.close()


@pytest.mark.parametrize("order", [("acme", "globex", None), (None, "globex", "acme")],
                         ids=lambda o: "-".join(map(who, o)))
def test_each_signed_in_user_sees_only_its_own_figures_in_any_order(fleet_db, browser, artifacts_dir, tmp_path,
                                                                     monkeypatch, order):
    prices = tmp_path / "prices.yaml"
    prices.write_text('currency: USD\ngpu_hour:\n  "NVIDIA A100-SXM4-80GB": "2.40"\n  "NVIDIA L4": "0.80"\n')
    monkeypatch.setenv("SLICEMETER_PRICES", str(prices))
    costs = gpu_costs(fleet_db, prices)
    assert len(set(costs.values())) == 3
    access = tmp_path / "access.yaml"
    access.write_text(ACCESS)
    seen = {}
    with serve_dashboard(fleet_db, tmp_path / "dashboard.log", "--access", str(access)) as url:
        for tenant in order:
            seen[tenant] = visit_as(browser, url, tenant, artifacts_dir, f"dashboard-{'-'.join(map(who, order))}-{who(tenant)}")
    for tenant, texts in seen.items():
        assert costs[tenant] in texts["fleet"], who(tenant)
        assert not [c for t, c in costs.items() if t != tenant and c in texts["fleet"]], who(tenant)
        leaked = {page: sorted(w for w in others_of(tenant) if w in text) for page, text in texts.items()}
        assert {page: words for page, words in leaked.items() if words} == {}, who(tenant)
        shown = {name for t, name, *_ in TENANTS if tenant in (None, t)}
        assert all(name in texts["fleet"] for name in shown), who(tenant)


def test_an_error_shown_to_a_tenant_names_nothing_of_another(fleet_db, browser, artifacts_dir, tmp_path, monkeypatch):
    """globex's L4 has no price: the bill fails for everyone. acme's user is told its bill is
    unavailable without globex's node or model; the platform user gets the cause."""
    prices = tmp_path / "prices.yaml"
    prices.write_text('currency: USD\ngpu_hour:\n  "NVIDIA A100-SXM4-80GB": "2.40"\n')
    monkeypatch.setenv("SLICEMETER_PRICES", str(prices))
    access = tmp_path / "access.yaml"
    access.write_text(ACCESS)
    texts = {}
    with serve_dashboard(fleet_db, tmp_path / "dashboard.log", "--access", str(access)) as url:
        for tenant in ("acme", None):
            context, page = signed_in_page(browser, tenant)
            frames = record_frames(page)
            page.goto(url + "tenants")
            page.wait_for_selector("text=The month's bill", timeout=60_000)
            page.wait_for_selector(dict(PAGES)["tenants"][1], timeout=60_000)
            page.goto(url + "exports")
            page.get_by_role("button", name=f"Write the {MONTH} files").click()
            page.wait_for_selector("text=The month's export", timeout=120_000)
            page.screenshot(path=str(artifacts_dir / f"dashboard-unpriced-{who(tenant)}.png"), full_page=True)
            texts[tenant] = page.inner_text("body") + b"".join(frames).decode("utf-8", "replace")
            context.close()
    assert "unavailable" in texts["acme"]
    assert sorted(w for w in others_of("acme") | {"NVIDIA L4"} if w in texts["acme"]) == []
    assert "NVIDIA L4" in texts[None]
