"""Two tenants' users (and a platform user) on one dashboard process, in either order: every
cached figure and every error each one sees is its own. Streamlit's caches live in the
process, so AppTest runs one after another share them as two browsers' sessions do."""
from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from slicemeter.chargeback import bill, prices
from slicemeter.chargeback.dividend import dividend
from slicemeter.dashboard import data, fmt
from slicemeter.testkit.dashboard_app import APP, metric
from slicemeter.testkit.fleet_fixture import NODES, TENANTS, build_fleet_db

MONTH = "2026-11"
ORDERS = [("acme", "globex", None), ("globex", None, "acme"), (None, "acme", "globex")]


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory) -> Path:
    return build_fleet_db(tmp_path_factory.mktemp("isolation") / "fleet.duckdb", MONTH)


def open_as(db: Path, tenant: str | None, monkeypatch, page: str | None = None) -> AppTest:
    monkeypatch.setenv("SLICEMETER_DB", str(db))
    if tenant is None:
        monkeypatch.delenv("SLICEMETER_TENANT", raising=False)
    else:
        monkeypatch.setenv("SLICEMETER_TENANT", tenant)
    at = AppTest.from_file(APP, default_timeout=120).run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, at.exception
    return at


def own_gpu_cost(db: Path, tenant: str | None) -> str:
    with data.open_db(db, tenant) as con:
        fleet = dividend(con, MONTH, prices.load_prices_or_default(None)).fleet
    return fmt.money(fleet.gpu_cost, fleet.currency)


def page_text(at: AppTest) -> str:
    """Everything a page shows as text: metrics, messages, captions, markdown, tables."""
    parts = [f"{m.label} {m.value}" for m in at.metric]
    parts += [e.body for kind in ("error", "warning", "info", "exception") for e in at.get(kind)]
    parts += [c.value for c in at.caption] + [c.value for c in at.markdown]
    parts += [d.value.to_csv() for d in at.dataframe] + [t.value.to_csv() for t in at.table]
    return "\n".join(map(str, parts))


@pytest.mark.parametrize("order", ORDERS, ids=lambda o: "-".join(t or "platform" for t in o))
def test_the_fleet_pages_dividend_is_each_users_own_in_any_order(fleet_db, monkeypatch, order):
    expected = {t: own_gpu_cost(fleet_db, t) for t in order}
    assert len(set(expected.values())) == 3     # three different figures: a mix-up would show
    data._dividend.clear()
    for tenant in order:
        at = open_as(fleet_db, tenant, monkeypatch)
        assert metric(at, "GPU cost (month to date)") == expected[tenant], tenant


@pytest.fixture
def prices_without_l4(tmp_path, monkeypatch) -> Path:
    """A catalog that prices acme's model but not the L4 on globex's and initech's nodes."""
    path = tmp_path / "prices.yaml"
    path.write_text('currency: USD\ngpu_hour:\n  "NVIDIA A100-SXM4-80GB": "2.40"\n')
    monkeypatch.setenv("SLICEMETER_PRICES", str(path))         # the export's child process
    for module in (prices, bill):                                # this process's pages
        monkeypatch.setattr(module, "DEFAULT_PRICES", path)
    data._fleet_chargeback.clear()
    data._dividend.clear()
    data._exports.clear()
    return path


# what another tenant's failure would reveal: its nodes, its GPU model, its names
OTHERS = sorted({n for n, (t, _m) in NODES.items() if t != "acme"} | {"NVIDIA L4"}
                | {w for t, name, api, _cc in TENANTS[1:] for w in (t, name, api)})


@pytest.mark.parametrize("page", ["tenants", "exports", "fleet", "waste"])
def test_an_error_from_another_tenants_data_names_nothing_of_it(fleet_db, monkeypatch, prices_without_l4, page):
    texts = {}
    for tenant in ("acme", None):
        at = open_as(fleet_db, tenant, monkeypatch, page)
        if page == "exports":
            at.button(key="export_build").click().run()
            assert not at.exception, at.exception
        texts[tenant] = page_text(at)
    if page in ("tenants", "exports"):   # the bill fails for everyone: acme is told so, without the cause
        assert "unavailable" in texts["acme"], texts["acme"]
        assert "NVIDIA L4" in texts[None]    # the platform user gets the cause
    assert [w for w in OTHERS if w in texts["acme"]] == []



def test_a_month_with_nothing_to_bill_gives_no_files_rather_than_an_error(fleet_db, monkeypatch):
    """`slicemeter export` refuses such a month (exit 4): the page says no files were written."""
    monkeypatch.setenv("SLICEMETER_DB", str(fleet_db))
    monkeypatch.setenv("SLICEMETER_TENANT", "nosuch")
    data._exports.clear()
    assert data.exports(MONTH, "allocation", "platform") == {}
