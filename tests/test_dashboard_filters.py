"""The GPUs page's filters, search and order, the Problems page, and the choice carried in
the URL: every list the pages show equals SQL written here against the raw tables of a
real DuckDB file (testkit/fleet_fixture.py with add_health_events)."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from slicemeter.chargeback.prices import load_prices_or_default
from slicemeter.dashboard import filters, fmt, money
from slicemeter.testkit.dashboard_app import run_app
from slicemeter.testkit.fleet_fixture import THROTTLED_GPU, XID_GPUS, add_health_events, build_fleet_db, gpu_uuid

MONTH = "2026-11"
NOV = "hour >= TIMESTAMP '2026-11-01' AND hour < TIMESTAMP '2026-12-01'"


@pytest.fixture(scope="module")
def fleet_db(tmp_path_factory) -> Path:
    db = build_fleet_db(tmp_path_factory.mktemp("filters") / "fleet.duckdb", MONTH)
    return add_health_events(db)


@pytest.fixture
def raw(fleet_db):
    con = duckdb.connect(str(fleet_db), read_only=True)
    yield con
    con.close()


def gpu_table(at):
    return next(d.value for d in at.dataframe if "unmetered_h" in d.value.columns)


def uuid_of(label: str, raw) -> str:
    node, short = label.split(" · ")
    return raw.execute("SELECT DISTINCT gpu_uuid FROM gpu_hour WHERE node = ? AND substr(gpu_uuid, 5, 8) = ?",
                       [node, short]).fetchone()[0]


def gpus_page(db, monkeypatch, **params):
    """The GPUs page opened from a link carrying `params` in its URL."""
    monkeypatch.setenv("SLICEMETER_DB", str(db))
    from streamlit.testing.v1 import AppTest
    from slicemeter.testkit.dashboard_app import APP

    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.query_params.update(params)
    at.switch_page("views/gpus.py").run()
    assert not at.exception, at.exception
    return at


def test_choice_from_a_url_keeps_only_what_the_scope_offers():
    offered = {"tenant": ["acme"], "node": ["gpu-node-1", "gpu-node-2"], "model": ["L4"], "driver": ["device plugin"]}
    got = filters.parse({"tenant": "globex", "node": ["gpu-node-9", "gpu-node-2"], "health": "xid",
                         "sort": "DROP TABLE", "q": "  x" * 200}, offered)
    assert got["tenant"] is None and got["node"] == "gpu-node-2" and got["health"] == "xid"
    assert got["sort"] == filters.DEFAULT_SORT and len(got["q"]) == filters.MAX_SEARCH
    assert filters.to_params({**got, "q": None}) == {"node": "gpu-node-2", "health": "xid"}
    assert filters.sql_params({"q": "pod-1", "sort": "waste"})["search"] == "pod-1"


def test_prices_for_the_sql_are_the_catalogs_exact_text():
    catalog = load_prices_or_default(None)
    lists = money.price_lists(catalog, [("NVIDIA L4", "n1", "c"), ("NVIDIA L4", "n1", "c"), ("no such GPU", "n2", "c")])
    assert lists == {"price_model": ["NVIDIA L4"], "price_node": ["n1"], "price_cluster": ["c"],
                     "price_per_h": [str(catalog.price("NVIDIA L4", "n1", "c"))]}
    assert money.price_lists(None, [("NVIDIA L4", "n1", "c")])["price_per_h"] == []


def test_the_list_is_in_natural_order_of_names(tmp_path, monkeypatch):
    db = build_fleet_db(tmp_path / "fleet3.duckdb", MONTH, days=2, copies=3)   # gpu-node-1 .. gpu-node-15
    at = run_app(db, monkeypatch, "gpus")
    nodes = [label.split(" · ")[0] for label in gpu_table(at)["gpu"]]
    assert nodes[:6] == ["gpu-node-1", "gpu-node-1", "gpu-node-2", "gpu-node-2", "gpu-node-3", "gpu-node-3"]
    assert nodes == sorted(nodes, key=lambda n: int(n.rsplit("-", 1)[1]))


def test_one_tenants_gpus_by_money_paid_for_but_unused(fleet_db, raw, monkeypatch):
    at = gpus_page(fleet_db, monkeypatch, tenant="acme", sort="waste_cost")
    table = gpu_table(at)
    catalog = load_prices_or_default(None)
    want = raw.execute(f"""SELECT s.gpu_uuid, any_value(g.model), any_value(s.node), any_value(s.cluster),
               sum(round(greatest(s.alloc_dominant_share_s - s.usage_share_s, 0) * 1000))::BIGINT
        FROM slice_hour s JOIN (SELECT DISTINCT gpu_uuid, model FROM gpu_hour) g USING (gpu_uuid)
        JOIN tenants t ON t.api_server = s.cluster WHERE t.tenant = 'acme' AND s.{NOV} GROUP BY s.gpu_uuid""").fetchall()
    cost = {u: money.share_cost(catalog.price(m, n, c), ms) for u, m, n, c, ms in want}
    got = [uuid_of(label, raw) for label in table["gpu"]]
    assert set(got) == set(cost) and len(got) == 4
    assert [cost[u] for u in got] == sorted(cost.values(), reverse=True)
    # the money shown is the exact amount, written as every other amount
    assert table["waste_cost"].tolist() == [fmt.money(cost[u], catalog.currency) for u in got]
    # a link to this view: the filters and the GPU whose slices it shows (the first)
    assert at.query_params == {"tenant": "acme", "sort": "waste_cost", "gpu": got[0]}


def test_every_gpu_with_a_critical_xid(fleet_db, raw, monkeypatch):
    at = gpus_page(fleet_db, monkeypatch, health="xid")
    got = {uuid_of(label, raw) for label in gpu_table(at)["gpu"]}
    want = {r[0] for r in raw.execute(f"SELECT DISTINCT gpu_uuid FROM gpu_hour WHERE xid_critical_count > 0 AND {NOV}")
            .fetchall()}
    assert got == want == set(XID_GPUS)
    assert gpu_table(at)["health"].str.contains("critical Xid").all()
    # throttled 40 of 60 minutes: degraded at the default 25 %; ordered by degraded hours
    at.selectbox(key="gpuf_health").set_value("degraded").run()
    at.selectbox(key="gpuf_sort").set_value("degraded").run()
    table = gpu_table(at)
    assert [uuid_of(g, raw) for g in table["gpu"]][-1] == THROTTLED_GPU
    assert table["degraded_h"].tolist() == [2, 2, 1]
    assert {k: v for k, v in at.query_params.items() if k != "gpu"} == {"health": "degraded", "sort": "degraded"}


def test_search_finds_a_gpu_by_pod_namespace_or_uuid_part(fleet_db, raw, monkeypatch):
    at = gpus_page(fleet_db, monkeypatch, q="EMBED-2")     # case-insensitive, a part of the pod's name
    want = raw.execute("SELECT DISTINCT gpu_uuid FROM slice_hour WHERE pod = 'embed-2'").fetchall()
    assert [uuid_of(g, raw) for g in gpu_table(at)["gpu"]] == [want[0][0]]
    at.text_input(key="gpuf_q").input("research").run()   # a namespace
    assert [uuid_of(g, raw) for g in gpu_table(at)["gpu"]] == [gpu_uuid("gpu-node-3", 1)]
    at.text_input(key="gpuf_q").input("%").run()          # no wildcards: nothing holds a '%'
    assert not at.exception
    assert any("No GPU matches" in i.value for i in at.info)


def test_filters_combine_and_a_link_names_the_picked_gpu(fleet_db, raw, monkeypatch):
    at = gpus_page(fleet_db, monkeypatch, model="NVIDIA L4", tenant="globex", gpu=gpu_uuid("gpu-node-4", 1))
    got = [uuid_of(g, raw) for g in gpu_table(at)["gpu"]]
    assert got == [gpu_uuid("gpu-node-4", 0), gpu_uuid("gpu-node-4", 1)]
    assert at.selectbox(key="gpu_pick").value.endswith(gpu_uuid("gpu-node-4", 1)[4:12])
    slices = next(d.value for d in at.dataframe if "pod" in d.value.columns)
    assert set(slices["pod"]) == {"ocr-0"}
    assert at.query_params["gpu"] == gpu_uuid("gpu-node-4", 1)


def test_a_tenants_user_is_offered_only_its_own(fleet_db, raw, monkeypatch):
    monkeypatch.setenv("SLICEMETER_TENANT", "acme")
    at = gpus_page(fleet_db, monkeypatch, node="gpu-node-3")     # globex's node: dropped
    assert not at.selectbox(key="gpuf_node").value
    assert at.selectbox(key="gpuf_node").options == ["all", "gpu-node-1", "gpu-node-2"]
    assert not [s for s in at.selectbox if s.key == "gpuf_tenant"]   # nothing to choose
    acme = {r[0] for r in raw.execute("""SELECT DISTINCT gpu_uuid FROM gpu_hour g JOIN tenants t
        ON t.api_server = g.cluster WHERE t.tenant = 'acme'""").fetchall()}
    assert {uuid_of(g, raw) for g in gpu_table(at)["gpu"]} == acme
    assert "node" not in at.query_params


def test_the_tenant_picked_travels_to_the_gpus_page(fleet_db, raw, monkeypatch):
    at = run_app(fleet_db, monkeypatch, "gpus")
    at.selectbox(key="gpuf_tenant").set_value("initech").run()
    at.switch_page("views/fleet.py").run()
    at.switch_page("views/gpus.py").run()      # back by the menu: the URL has nothing, the session has it
    assert not at.exception
    assert at.selectbox(key="gpuf_tenant").value == "initech"
    assert {g.split(" · ")[0] for g in gpu_table(at)["gpu"]} == {"gpu-node-5"}


def test_problems_lists_what_needs_a_person_with_links_to_the_slices(fleet_db, raw, monkeypatch):
    at = run_app(fleet_db, monkeypatch, "problems")
    rows = next(d.value for d in at.dataframe if "slices" in d.value.columns)
    by_kind = rows.groupby("kind")
    degraded = rows[rows["kind"] == "degraded GPU-hours"]
    assert {uuid_of(g, raw) for g in degraded["gpu"]} == set(XID_GPUS) | {THROTTLED_GPU}
    assert degraded["hours"].tolist() == [2, 2, 1]
    unmetered = rows[rows["kind"] == "unmetered gap"]
    assert set(unmetered["gpu"].str.split(" · ").str[0]) == {"gpu-node-5"} and set(unmetered["hours"]) == {3}
    unverified = rows[rows["kind"] == "usage unverified"]
    want_h = raw.execute("SELECT sum(usage_unverified_s) / 3600 FROM slice_hour WHERE pod = 'rerank-0'").fetchone()[0]
    assert unverified["slice"].tolist() == ["chat/rerank-0/server"] and unverified["hours"].tolist() == [want_h]
    idle = rows[rows["kind"] == "allocated but idle"]
    assert [uuid_of(g, raw) for g in idle["gpu"]] == [gpu_uuid("gpu-node-3", 1)]    # the reservation never used
    memory = rows[rows["kind"] == "near its memory limit"]
    want = {r[0] for r in raw.execute(f"""SELECT pod FROM slice_hour WHERE {NOV} GROUP BY pod, pod_uid, container
        HAVING max(memory_used_max_bytes) / arg_max(alloc_memory_bytes, hour) >= 0.9""").fetchall()}
    assert {s.split("/")[1] for s in memory["slice"]} == want == {"train-llama-0", "fine-tune"}
    assert all(link == f"gpus?gpu={uuid_of(g, raw)}" for g, link in zip(rows["gpu"], rows["slices"]))
    assert not rows.isna().any().any() and len(by_kind) == 5
    counts = {m.label: m.value for m in at.metric}
    assert counts["degraded GPU-hours"] == "3" and counts["usage unknown"] == "0"


def test_problem_links_open_the_gpus_slices(fleet_db, raw, monkeypatch):
    at = gpus_page(fleet_db, monkeypatch, gpu=gpu_uuid("gpu-node-3", 1))
    slices = next(d.value for d in at.dataframe if "pod" in d.value.columns)
    assert slices["pod"].tolist() == ["reserved-gpu"]


def test_problems_of_one_tenant_and_the_choice_kept_for_gpus(fleet_db, raw, monkeypatch):
    at = run_app(fleet_db, monkeypatch, "problems")
    at.selectbox(key="problems_tenant").set_value("initech").run()
    rows = next(d.value for d in at.dataframe if "slices" in d.value.columns)
    assert set(rows["tenant"]) == {"initech"}
    assert set(rows["kind"]) == {"unmetered gap", "near its memory limit"}
    at.switch_page("views/gpus.py").run()                  # the tenant travels to the GPUs page
    assert at.selectbox(key="gpuf_tenant").value == "initech"
