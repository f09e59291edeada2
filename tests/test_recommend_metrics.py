"""The right-sizing headline figures served by ingest's metrics endpoint
(`slicemeter ingest --recommend-interval`): a real snapshot file, a real HTTP scrape,
compared with build_plan's summary of the same file."""
from __future__ import annotations

import shutil
import urllib.request
from datetime import datetime, timezone

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slicemeter.ingest.metrics import IngestMetrics
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.rightsizing.plan import build_plan
from slicemeter.ingest.headlines import HeadlineRefresher
from slicemeter.store import connect
from slicemeter.testkit.ingest_helpers import poll
from slicemeter.testkit.recommend_rows import build_fleet
from slicemeter.cli import main

NOV = datetime(2026, 11, 20, 12, tzinfo=timezone.utc)  # slicemeter.testkit.recommend_rows' fleet is in 2026-11


def scrape(port: int) -> dict[str, list[tuple[dict, float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    out: dict[str, list[tuple[dict, float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("slicemeter_recommend_"):
                out.setdefault(s.name, []).append((s.labels, s.value))
    return out


@pytest.fixture
def served():
    metrics = IngestMetrics()
    server, _thread = metrics.serve(0, addr="127.0.0.1")
    yield metrics, server.server_port
    server.shutdown()


def test_served_figures_match_the_plan(tmp_path, served):
    metrics, port = served
    snapshot = tmp_path / "snapshot.duckdb"
    catalog = load_prices(DEFAULT_PRICES)
    refresher = HeadlineRefresher(snapshot, 0.2, metrics.recommend, catalog, now=lambda: NOV).start()
    try:
        # no snapshot yet: nothing is served rather than a made-up 0
        assert refresher.refresh() is False
        assert scrape(port) == {}
        build = tmp_path / "build.duckdb"
        con = connect(build)
        build_fleet(con)
        con.close()
        shutil.copyfile(build, snapshot)  # the snapshot appears while the thread is running
        got = poll(lambda: scrape(port), "the first plan's figures")
    finally:
        refresher.stop()
    con = connect(snapshot, read_only=True)
    summary = build_plan(con, "2026-11", 0.2, catalog).summary
    con.close()
    assert summary["gpus_freeable"] > 0 and summary["monthly_saving"] > 0  # not a degenerate fleet
    assert got["slicemeter_recommend_freeable_gpus"] == [({}, float(summary["gpus_freeable"]))]
    assert got["slicemeter_recommend_monthly_saving"] == [
        ({"currency": catalog.currency}, float(summary["monthly_saving"]))]


def test_a_month_without_data_frees_nothing(tmp_path, served):
    metrics, port = served
    snapshot = tmp_path / "snapshot.duckdb"
    con = connect(snapshot)
    build_fleet(con)
    con.close()
    october = datetime(2026, 10, 5, tzinfo=timezone.utc)
    assert HeadlineRefresher(snapshot, 60, metrics.recommend, load_prices(DEFAULT_PRICES),
                              now=lambda: october).refresh()
    got = scrape(port)
    assert got["slicemeter_recommend_freeable_gpus"] == [({}, 0.0)]
    assert got["slicemeter_recommend_monthly_saving"] == [({"currency": "USD"}, 0.0)]


@pytest.mark.parametrize("extra, key", [
    (["--recommend-interval", "-1", "--snapshot", "s.duckdb", "--metrics-port", "9"], "--recommend-interval"),
    (["--recommend-interval", "5", "--metrics-port", "9"], "--snapshot"),
    (["--recommend-interval", "5", "--snapshot", "s.duckdb"], "--metrics-port"),
    (["--recommend-interval", "5", "--snapshot", "s.duckdb", "--metrics-port", "9",
      "--prices", "/nonexistent/prices.yaml"], "--prices"),
])
def test_recommend_option_config_errors(tmp_path, capsys, extra, key):
    extra = [str(tmp_path / a) if a == "s.duckdb" else a for a in extra]
    rc = main(["ingest", "--kafka", "127.0.0.1:9", "--db", str(tmp_path / "x.duckdb"), *extra])
    assert rc == 2
    assert key in capsys.readouterr().err
    assert not (tmp_path / "x.duckdb").exists()  # stopped before opening the store


def test_dividend_figures_are_served_beside_the_plan(tmp_path, served):
    """The current month's sharing dividend, fleet and per tenant, equal to `slicemeter
    report`'s figures of the same snapshot."""
    from slicemeter.chargeback.dividend import dividend

    metrics, port = served
    snapshot = tmp_path / "snapshot.duckdb"
    con = connect(snapshot)
    build_fleet(con)
    con.close()
    catalog = load_prices(DEFAULT_PRICES)
    assert HeadlineRefresher(snapshot, 60, metrics.recommend, catalog, now=lambda: NOV,
                              dividend=metrics.dividend).refresh()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    con = connect(snapshot, read_only=True)
    want = dividend(con, "2026-11", catalog)
    con.close()
    samples = families["slicemeter_dividend_sharing_factor"].samples
    got = {s.labels["scope"]: s.value for s in samples if s.labels["month"] == "2026-11"}
    assert want.fleet.sharing_factor > 1                     # a fleet that shares
    assert got == pytest.approx({f.scope: f.sharing_factor for f in [want.fleet, *want.tenants]
                                 if f.sharing_factor is not None})
    assert not [s for s in samples if s.labels["month"] == "2026-10"]   # the month before: no slices, no ratio
    cost = families["slicemeter_dividend_monthly_cost_avoided"].samples
    assert ({"scope": "fleet", "month": "2026-11", "currency": "USD"}, float(want.fleet.monthly_cost_avoided)) in [
        (s.labels, s.value) for s in cost]
