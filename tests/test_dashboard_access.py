"""The dashboard's tenant scope and sign-in: a tenant's connection, queries, chargeback,
exports and right-sizing plan hold that tenant's rows only; identity comes from the
authenticating proxy's headers and maps groups to tenants.

The scoped results are checked against the unscoped store (testkit/fleet_fixture.py, plus
namespace overrides that move a slice across clusters), not against sql/dashboard/.
"""
from __future__ import annotations

import csv
import io
import re
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from streamlit.testing.v1 import AppTest

from slicemeter.dashboard import access, data
from slicemeter.dashboard.cli import configure, is_loopback, run as run_dashboard, streamlit_argv
from slicemeter.testkit.fleet_fixture import TENANTS, build_fleet_db
from slicemeter.chargeback.bill import compute_bill
from slicemeter.store import SQL_DIR, connect, sql_text
from slicemeter.common import ConfigError

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
MONTH = "2026-11"
BOUNDS = {"start": datetime(2026, 11, 1), "end": datetime(2026, 12, 1)}
ACME_API, GLOBEX_API = TENANTS[0][2], TENANTS[1][2]
QUERIES = sorted(p.stem for p in (SQL_DIR / "dashboard").glob("*.sql"))


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory) -> Path:
    """The fixture fleet, with one namespace of globex's cluster billed to acme (its slice
    sits on globex's GPU) and one of acme's billed to globex."""
    db = build_fleet_db(tmp_path_factory.mktemp("access") / "fleet.duckdb", MONTH)
    con = connect(db)
    con.execute("INSERT INTO tenant_namespace_overrides VALUES (?, 'vision', 'acme'), (?, 'etl', 'globex')",
                [GLOBEX_API, ACME_API])
    con.close()
    return db


@pytest.fixture(scope="module")
def truth(fleet_db):
    """Who owns what, from the unscoped store's own attribution views."""
    con = connect(fleet_db, read_only=True)
    q = lambda sql: con.execute(sql, BOUNDS if "$start" in sql else None).fetchall()  # noqa: E731
    t = {
        "acme_pods": {r[0] for r in q("SELECT DISTINCT pod FROM slice_hour_tenant WHERE tenant = 'acme'")},
        "other_pods": {r[0] for r in q("SELECT DISTINCT pod FROM slice_hour_tenant WHERE tenant <> 'acme'")},
        "acme_gpus": {r[0] for r in q("SELECT DISTINCT gpu_uuid FROM gpu_hour_tenant WHERE tenant = 'acme'")},
        "acme_slice_gpus": {r[0] for r in q("SELECT DISTINCT gpu_uuid FROM slice_hour_tenant WHERE tenant = 'acme'")},
        "globex_gpu": q("SELECT min(gpu_uuid) FROM gpu_hour_tenant WHERE tenant = 'globex'")[0][0],
        "acme_capacity_h": q("SELECT sum(metered_s) / 3600 FROM gpu_hour_tenant WHERE tenant = 'acme' "
                             "AND hour >= $start AND hour < $end")[0][0],
        "acme_alloc_h": q("SELECT sum(alloc_dominant_share_s) / 3600 FROM slice_hour_tenant WHERE tenant = 'acme' "
                          "AND hour >= $start AND hour < $end")[0][0],
    }
    con.close()
    assert "ocr-0" in t["acme_pods"] and "nightly-etl" in t["other_pods"]   # the overrides apply
    return t


OTHER_IDS = {t for t, *_ in TENANTS[1:]} | {"platform", "unassigned"}
OTHER_NAMES = [w for _t, name, _api, cc in TENANTS[1:] for w in (name, cc)]


def leaks(cells, truth) -> list[str]:
    """Cells that name another tenant or show another tenant's slice. (A slice billed to
    acme through an override still names the cluster and node it runs on: its own row.)"""
    return [c for c in map(str, cells)
            if c in OTHER_IDS or any(w in c for w in OTHER_NAMES) or any(p in c for p in truth["other_pods"])]


def file_cells(name: str, blob: bytes) -> list[str]:
    if name.endswith(".csv"):
        return [c for row in csv.reader(io.StringIO(blob.decode())) for c in row]
    table = pq.read_table(io.BytesIO(blob))
    return [str(v) for col in table.columns for v in col.to_pylist()]


def params_for(name: str, truth) -> dict:
    values = {"bucket": "hour", "gpu": truth["globex_gpu"], "gpus": sorted(truth["acme_gpus"] | {truth["globex_gpu"]}),
              "min_idle_s": 0, "limit": 1_000_000, "offset": 0,
              "tenant": None, "node": None, "model": None, "driver": None, "health": None, "search": None,
              "sort": "problems", "price_model": [], "price_node": [], "price_cluster": [], "price_per_h": [],
              "idle_alloc_min": 0.5, "idle_util_max": 0.05, "memory_limit_share": 0.9,
              "max_life_s": 10**9, "min_idle_share": 0.0,
              "carbon_g_per_kwh": 320.0, "throttled_share": 0.25, **BOUNDS}
    wanted = set(re.findall(r"\$(\w+)", sql_text(f"dashboard/{name}.sql")))
    return {k: values[k] for k in wanted}


@pytest.mark.parametrize("name", QUERIES)
def test_every_dashboard_query_on_a_tenant_connection_holds_only_its_rows(fleet_db, truth, name):
    with data.open_db(fleet_db, "acme") as con:
        df = con.execute(sql_text(f"dashboard/{name}.sql"), params_for(name, truth)).df()
    assert not leaks(df.to_numpy().ravel(), truth), name
    if "tenant" in df.columns:
        assert set(df["tenant"]) <= {"acme"}, name
    if "gpu_uuid" in df.columns and "pod" not in df.columns:   # GPU-level rows: acme's GPUs
        assert set(df["gpu_uuid"]) <= truth["acme_gpus"], name


def test_a_tenant_connection_totals_are_that_tenants_own(fleet_db, truth):
    with data.open_db(fleet_db, "acme") as con:
        summary = con.execute(sql_text("dashboard/fleet_summary.sql"), BOUNDS).df().iloc[0]
        usage = con.execute(sql_text("dashboard/tenant_usage.sql"), BOUNDS).df()
        months = con.execute(sql_text("dashboard/months.sql")).df()
    assert summary.capacity_gpu_h == pytest.approx(truth["acme_capacity_h"]) and summary.tenants == 1
    assert usage["allocated_gpu_h"].sum() == pytest.approx(truth["acme_alloc_h"])
    assert set(usage["pod" if "pod" in usage else "namespace"]) >= {"vision"}   # the override moved it here
    assert months["month"].tolist() == [MONTH]
    with data.open_db(fleet_db, None) as con:   # unscoped: the whole fleet, for contrast
        whole = con.execute(sql_text("dashboard/fleet_summary.sql"), BOUNDS).df().iloc[0]
    assert whole.capacity_gpu_h > summary.capacity_gpu_h and whole.tenants == 3


def test_every_other_table_reads_empty_on_a_tenant_connection(fleet_db):
    with data.open_db(fleet_db, None) as con:
        tables = [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables() "
                                            "WHERE database_name = current_database()").fetchall()]
    with data.open_db(fleet_db, "acme") as con:
        counts = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        scope = data.connection_scope(con)
    assert scope == "acme"
    scoped = {"gpu_hour", "slice_hour", "tenants", "tenant_namespace_overrides"}
    assert all(counts[t] > 0 for t in scoped)
    assert {t: n for t, n in counts.items() if t not in scoped and n} == {}
    assert "schema_migrations" in counts   # hidden too: nothing is read past the scope


def test_a_tenants_chargeback_and_exports_are_the_full_bills_rows_of_it(fleet_db, truth, monkeypatch):
    monkeypatch.setenv("SLICEMETER_DB", str(fleet_db))
    monkeypatch.setenv("SLICEMETER_TENANT", "acme")
    bill = data.chargeback(MONTH, "allocation", "shared")
    con = connect(fleet_db, read_only=True)
    full = compute_bill(con, MONTH, "allocation", "shared")
    con.close()
    assert set(bill["tenant"]) == {"acme"}
    assert sum(bill["cost"], Decimal(0)) == sum(full.invoice.loc[full.invoice["tenant"] == "acme", "cost"], Decimal(0))
    files = data.exports(MONTH, "allocation", "platform")
    assert sorted(files) == [f"{k}-{MONTH}-acme.{e}" for k, e in
                             (("detail", "parquet"), ("focus", "csv"), ("focus", "parquet"), ("invoice", "csv"))]
    for name, blob in files.items():
        cells = file_cells(name, blob)
        assert cells and not leaks(cells, truth), name
        assert "acme" in cells and "vision" in " ".join(cells), name   # its own rows, the moved slice's too


def test_the_fleets_bill_is_computed_once_for_every_tenants_requests(fleet_db, monkeypatch):
    """Tenants' chargeback views read one fleet bill per data version: a second tenant's
    request computes nothing; each sees only its rows, the sum of which is the fleet's."""
    import slicemeter.chargeback.bill as cb
    calls = []
    real = cb.chargeback

    def counted(*args, **kw):
        calls.append(kw.get("tenant"))
        return real(*args, **kw)
    monkeypatch.setattr(cb, "chargeback", counted)
    monkeypatch.setenv("SLICEMETER_DB", str(fleet_db))
    data._fleet_chargeback.clear()
    seen = {}
    for tenant in ("acme", "globex", None):
        if tenant is None:
            monkeypatch.delenv("SLICEMETER_TENANT", raising=False)
        else:
            monkeypatch.setenv("SLICEMETER_TENANT", tenant)
        seen[tenant] = data.chargeback(MONTH, "usage", "platform")
    assert calls == [None]
    assert set(seen["acme"]["tenant"]) == {"acme"} and set(seen["globex"]["tenant"]) == {"globex"}
    assert list(seen["acme"].index) == list(range(len(seen["acme"])))
    fleet = seen[None]
    for tenant in ("acme", "globex"):
        assert sum(seen[tenant]["cost"], Decimal(0)) == sum(fleet.loc[fleet["tenant"] == tenant, "cost"], Decimal(0))


def test_right_sizing_plans_the_tenants_fleet_and_caches_per_tenant(fleet_db, truth):
    from slicemeter.dashboard.right_sizing import _plan

    with data.open_db(fleet_db, "acme") as con:
        acme, _ = _plan(con, MONTH, 0.2)
    with data.open_db(fleet_db, "globex") as con:
        globex, _ = _plan(con, MONTH, 0.2)
    # acme's GPUs, plus the one globex GPU its moved slice runs on (catalogued for acme as
    # an unknown cluster: globex's catalog entry is out of scope)
    assert set(acme.groups["tenant"]) == {"acme", "unassigned"} and set(globex.groups["tenant"]) >= {"globex"}
    assert set(acme.slices["pod"]) <= truth["acme_pods"] and set(globex.slices["pod"]).isdisjoint(truth["acme_pods"])
    assert set(acme.placement["gpu_uuid"]) == truth["acme_gpus"] | truth["acme_slice_gpus"]
    for frame in (acme.groups, acme.placement, acme.slices):
        assert not [c for c in leaks(frame.to_numpy().ravel(), truth) if c != "unassigned"]


def test_pages_served_for_one_tenant_show_only_it(fleet_db, truth, monkeypatch):
    monkeypatch.setenv("SLICEMETER_DB", str(fleet_db))
    monkeypatch.setenv("SLICEMETER_TENANT", "acme")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and any("Tenant: **acme**" in c.value for c in at.sidebar.caption)
    for page in ("fleet", "tenants", "gpus", "waste"):
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, (page, at.exception)
        shown = [str(v) for d in at.dataframe for v in d.value.astype(str).to_numpy().ravel()]
        shown += [str(v) for t in at.table for v in t.value.reset_index().astype(str).to_numpy().ravel()]
        shown += [m.value for m in at.metric] + [s.value for s in at.selectbox if isinstance(s.value, str)]
        assert shown and not leaks(shown, truth), page
    at.switch_page("views/tenants.py").run()
    con = connect(fleet_db, read_only=True)
    acme = compute_bill(con, MONTH, "allocation", "platform", tenant="acme").invoice
    con.close()
    total = next(m.value for m in at.metric if m.label.startswith("Total"))
    assert total == f"${sum(acme['cost'], Decimal(0)):,.2f}"


def test_a_tenant_without_data_is_told_so(fleet_db, monkeypatch):
    monkeypatch.setenv("SLICEMETER_DB", str(fleet_db))
    monkeypatch.setenv("SLICEMETER_TENANT", "nosuch")
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception and not at.metric
    assert any("No metered GPU-hours for tenant nosuch" in w.body for w in at.warning)


def test_signed_in_dashboard_without_the_proxys_headers_shows_nothing(fleet_db, monkeypatch, tmp_path):
    cfg = tmp_path / "access.yaml"
    cfg.write_text("groups:\n  acme-team: [acme]\n")
    monkeypatch.setenv("SLICEMETER_DB", str(fleet_db))
    monkeypatch.setenv("SLICEMETER_ACCESS", str(cfg))
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert any("No single signed-in user (X-Forwarded-Email)" in e.body for e in at.error)
    assert not at.metric and not at.dataframe and not at.table


# --- headers -> tenants (pure) ---------------------------------------------------------------

class H:
    """Request headers as Streamlit gives them: repeated lines kept, names case-insensitive."""

    def __init__(self, *pairs: tuple[str, str]):
        self.pairs = pairs

    def get_all(self, key: str) -> list[str]:
        return [v for k, v in self.pairs if k.lower() == key.lower()]


CFG = access.parse_access({"groups": {"acme-team": ["acme"], "globex-team": ["globex"],
                                      "finance": ["acme", "globex"], "platform-ops": "*"}})


def test_groups_map_to_tenants_from_repeated_or_folded_headers():
    me = ("X-Forwarded-Email", "ann@acme.example")
    assert access.allowed_tenants(CFG, H(me, ("X-Forwarded-Groups", "acme-team"))) == ("ann@acme.example", {"acme"})
    # oauth2-proxy adds one header line per group; a server may fold them with commas
    two = {"acme", "globex"}
    assert access.allowed_tenants(CFG, H(me, ("x-forwarded-groups", "acme-team"), ("X-Forwarded-Groups", "globex-team")))[1] == two
    assert access.allowed_tenants(CFG, H(me, ("X-Forwarded-Groups", "staff, acme-team,globex-team")))[1] == two
    assert access.allowed_tenants(CFG, H(me, ("X-Forwarded-Groups", "staff,platform-ops")))[1] is None


@pytest.mark.parametrize("headers,reason", [
    (H(), "No single signed-in user"),
    (H(("X-Forwarded-Groups", "platform-ops")), "No single signed-in user"),
    (H(("X-Forwarded-Email", " ")), "No single signed-in user"),
    (H(("X-Forwarded-Email", "a@x"), ("X-Forwarded-Email", "b@x")), "No single signed-in user"),
    (H(("X-Forwarded-Email", "eve@x")), "none of your groups"),
    (H(("X-Forwarded-Email", "eve@x"), ("X-Forwarded-Groups", "Acme-Team,acme")), "none of your groups"),
])
def test_requests_without_a_user_or_a_granting_group_are_denied(headers, reason):
    with pytest.raises(access.Denied, match=reason):
        access.allowed_tenants(CFG, headers)


def test_the_scope_is_the_fixed_tenant_or_an_allowed_choice():
    assert access.resolve_scope(None, None) is None
    assert access.resolve_scope("acme", None) == "acme"
    assert access.resolve_scope("acme", frozenset({"acme", "globex"})) == "acme"
    with pytest.raises(access.Denied, match="serves tenant globex"):
        access.resolve_scope("globex", frozenset({"acme"}))
    two = frozenset({"globex", "acme"})
    assert access.resolve_scope(None, two) == "acme"
    assert access.resolve_scope(None, two, "globex") == "globex"
    assert access.resolve_scope(None, two, "initech") == "acme"   # a choice outside the grant is ignored


def test_header_names_are_configurable():
    cfg = access.parse_access({"user_header": "X-Auth-Request-Email", "groups_header": "X-Auth-Request-Groups",
                               "groups": {"g": ["acme"]}})
    hs = H(("X-Forwarded-Email", "spoof@x"), ("X-Auth-Request-Email", "ann@x"), ("X-Auth-Request-Groups", "g"))
    assert access.allowed_tenants(cfg, hs) == ("ann@x", {"acme"})


@pytest.mark.parametrize("doc,message", [
    (None, "needs `groups:`"), ({"groups": {}}, "needs `groups:`"), ({"groups": ["a"]}, "needs `groups:`"),
    ({"groups": {"g": "acme"}}, "a list of tenant ids"), ({"groups": {"g": []}}, "a list of tenant ids"),
    ({"groups": {"g": ["Acme Corp"]}}, "not a tenant id"), ({"groups": {"a,b": ["acme"]}}, "without commas"),
    ({"groups": {"g": ["acme"]}, "user_header": ""}, "user_header"),
    ({"groups": {"g": ["acme"]}, "trust": "all"}, "unknown keys"),
])
def test_a_broken_access_file_is_a_clear_error(doc, message):
    with pytest.raises(ConfigError, match=message):
        access.parse_access(doc)


# --- slicemeter dashboard --------------------------------------------------------------------

def parse(*argv: str):
    import argparse

    p = argparse.ArgumentParser()
    configure(p)
    return p.parse_args(list(argv))


def test_the_dashboard_listens_on_loopback_by_default_and_passes_its_scope(fleet_db):
    args = parse("--db", str(fleet_db))
    assert args.address == "127.0.0.1"
    argv = streamlit_argv(fleet_db, 8501, args.address, "acme", Path("/etc/a.yaml"))
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"
    assert argv[argv.index("--") + 1:] == ["--db", str(fleet_db), "--tenant", "acme", "--access", "/etc/a.yaml"]


def test_header_sign_in_refuses_an_address_others_can_reach(fleet_db, tmp_path):
    cfg = tmp_path / "access.yaml"
    cfg.write_text("groups:\n  ops: '*'\n")
    assert [is_loopback(a) for a in ("127.0.0.1", "::1", "localhost", "127.0.0.2", "0.0.0.0", "10.0.0.5", "::")] == \
        [True, True, True, True, False, False, False]
    with pytest.raises(ConfigError, match="--address must be loopback, not 0.0.0.0"):
        run_dashboard(parse("--db", str(fleet_db), "--access", str(cfg), "--address", "0.0.0.0"))
    cfg.write_text("groups: {}\n")
    with pytest.raises(ConfigError, match="needs `groups:`"):
        run_dashboard(parse("--db", str(fleet_db), "--access", str(cfg)))
    with pytest.raises(ConfigError, match="not a tenant id"):
        run_dashboard(parse("--db", str(fleet_db), "--tenant", "../etc"))
