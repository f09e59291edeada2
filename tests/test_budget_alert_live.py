"""A tenant crossing its budget forecast mid-month fires the alert in a real Prometheus.

The store holds the first 14.5 days of November 2026 (one GPU each for two tenants); ingest
runs as of 2026-11-15T12:00Z (SLICEMETER_NOW) with the tenant catalog's budgets and serves
the live bill on its /metrics. Debian's Prometheus scrapes it and evaluates the repo's budget
rules, each `for:` cut to seconds (a test cannot wait the hour; the promtool tests in
prometheus/tests/ check the real durations). Nothing fires while acme's forecast is under
its budget; then a node of acme's publishes four hours of Ticks through the Tansu broker,
ingest stores them, the forecast crosses the budget and the alert fires for acme, never
for globex, which stays under its budget, and the budget itself is not yet exceeded.
"""
from __future__ import annotations

import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
import yaml

from slicemeter.broker import TansuBroker, free_port
from slicemeter.testkit.cb_rows import A100, ACME, GLOBEX, add_gpu, add_slice, open_store
from slicemeter.testkit.ingest_helpers import create_topic, produce_chunks
from slicemeter.testkit.synth_ticks import SynthNode, node_tables
from test_prometheus_live import PromAPI, poll, samples_of, start, stop, wait_for_metrics

pytestmark = [pytest.mark.prometheus, pytest.mark.broker]

REPO = Path(__file__).resolve().parent.parent
BUDGET_RULES = REPO / "prometheus" / "rules" / "slicemeter-budget.yml"
NOW = datetime(2026, 11, 15, 12, 0, tzinfo=timezone.utc)
HOURS = 348                          # Nov 1 00:00 to Nov 15 12:00
BUDGET = {"acme": "1750.00", "globex": "1000.00"}
FORECAST = "slicemeter_tenant_month_forecast_charge"
CROSSING = "SlicemeterTenantForecastOverBudget"


def prepared_store(path: Path) -> None:
    """acme: a whole A100 every hour ($2.40/h: forecast $1,728 < $1,750); globex: a quarter."""
    with open_store(path, fill=lambda con: None) as con:
        for h in range(HOURS):
            hour = (datetime(2026, 11, 1) + timedelta(hours=h)).isoformat(sep=" ")
            add_gpu(con, hour=hour, gpu="GPU-acme", node="acme-node", cluster=ACME)
            add_slice(con, "trainer", 1.0, hour=hour, gpu="GPU-acme", node="acme-node", cluster=ACME)
            add_gpu(con, hour=hour, gpu="GPU-globex", node="globex-node", cluster=GLOBEX)
            add_slice(con, "notebook", 0.25, hour=hour, gpu="GPU-globex", node="globex-node", cluster=GLOBEX)


def rules_with_short_for(tmp: Path) -> Path:
    """The repo's budget rules with every `for:` cut to 3 s, and nothing else changed."""
    doc = yaml.safe_load(BUDGET_RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "3s"
    original = yaml.safe_load(BUDGET_RULES.read_text())
    assert [{k: v for k, v in r.items() if k != "for"} for g in doc["groups"] for r in g["rules"]] == \
           [{k: v for k, v in r.items() if k != "for"} for g in original["groups"] for r in g["rules"]]
    out = tmp / "slicemeter-budget.yml"
    out.write_text(yaml.safe_dump(doc))
    return out


def budget_alerts(api: PromAPI) -> list[dict]:
    return [a for a in api.get("/api/v1/alerts")["data"]["alerts"]
            if a["labels"]["alertname"].startswith("SlicemeterTenant")]


def acme_ticks() -> list:
    """Four hours of a busy 8-GPU node on acme's cluster, one Tick per 10 minutes, up to NOW."""
    interval_ms = 600_000
    end_ms = int(NOW.timestamp() * 1000)
    ts = end_ms - interval_ms * np.arange(24)[::-1]
    node = SynthNode("acme-burst", ACME, gpus=8, slices_per_gpu=4)
    return [(node.node, *node_tables(node, ts[i:i + 6], interval_ms)) for i in range(0, 24, 6)]


@pytest.fixture
def live(tmp_path, monkeypatch):
    db = tmp_path / "slicemeter.duckdb"
    prepared_store(db)
    (tmp_path / "tenants.yaml").write_text(yaml.safe_dump({"tenants": [
        {"name": "acme", "api_server": ACME, "monthly_budget": BUDGET["acme"]},
        {"name": "globex", "api_server": GLOBEX, "monthly_budget": BUDGET["globex"]}]}))
    (tmp_path / "prices.yaml").write_text(yaml.safe_dump({"currency": "USD", "gpu_hour": {A100: "2.40"}}))
    procs = []
    with TansuBroker(log_path=tmp_path / "tansu.log") as broker:
        try:
            create_topic(broker.bootstrap)
            ingest_port = free_port()
            monkeypatch.setenv("SLICEMETER_NOW", NOW.strftime("%Y-%m-%dT%H:%M:%SZ"))   # ingest's clock
            ingest, ingest_log = start(tmp_path, "ingest", [
                "ingest", "--kafka", broker.bootstrap, "--db", str(db), "--tenants", str(tmp_path / "tenants.yaml"),
                "--prices", str(tmp_path / "prices.yaml"), "--metrics-port", str(ingest_port),
                "--snapshot", str(tmp_path / "snapshot.duckdb"), "--snapshot-interval", "1",
                "--bill-interval", "1"])
            procs.append(ingest)
            text = wait_for_metrics(ingest, ingest_log, ingest_port, lambda t: f'{FORECAST}{{' in t,
                                    "ingest's first live bill", timeout=60)
            prom_port = free_port()
            config = {
                "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(rules_with_short_for(tmp_path))],
                "scrape_configs": [{"job_name": "slicemeter-ingest",
                                    "static_configs": [{"targets": [f"127.0.0.1:{ingest_port}"]}]}],
            }
            (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
            with (tmp_path / "prometheus.log").open("wb") as log:
                procs.append(subprocess.Popen(
                    [shutil.which("prometheus") or "prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                     f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                     "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT))
            yield {"api": PromAPI(f"http://127.0.0.1:{prom_port}"), "broker": broker, "first": text,
                   "ingest": (ingest, ingest_log, ingest_port)}
        finally:
            for proc in reversed(procs):
                stop(proc)


def served(text: str, name: str) -> dict[str, Decimal]:
    return {labels["tenant"]: Decimal(repr(v)) for labels, v in samples_of(text, name)}


def test_forecast_over_budget_fires_for_the_tenant_that_crosses_it_mid_month(live):
    api = live["api"]
    first = served(live["first"], FORECAST)
    assert first["globex"] < Decimal(BUDGET["globex"])
    assert Decimal("1700") < first["acme"] < Decimal(BUDGET["acme"])   # about 24 h x 30 days x $2.40
    assert served(live["first"], "slicemeter_tenant_month_budget") == {t: Decimal(b) for t, b in BUDGET.items()}

    # Under budget: several evaluations of the rules over the served series, and no alert.
    poll(lambda: api.query(f'count_over_time({FORECAST}{{tenant="acme"}}[1m]) >= 6'),
         "six scrapes of acme's forecast", timeout=60)
    rules = [r for g in api.get("/api/v1/rules")["data"]["groups"] for r in g["rules"]]
    assert {r["name"] for r in rules} == {CROSSING, "SlicemeterTenantBudgetExceeded"}
    assert all(r["health"] == "ok" and r["state"] == "inactive" for r in rules), rules
    assert budget_alerts(api) == []

    produce_chunks(live["broker"].bootstrap, acme_ticks())

    def firing():
        alerts = budget_alerts(api)
        return alerts if any(a["state"] == "firing" for a in alerts) else None
    alerts = poll(firing, "the forecast-over-budget alert to fire", timeout=90)
    assert [(a["labels"]["alertname"], a["labels"]["tenant"], a["labels"]["basis"], a["state"]) for a in alerts] == \
           [(CROSSING, "acme", "allocation", "firing")]
    (forecast,) = api.query(f'{FORECAST}{{tenant="acme"}}')
    assert Decimal(forecast["value"][1]) > Decimal(BUDGET["acme"])
    (spent,) = api.query('slicemeter_tenant_month_to_date_charge{tenant="acme"}')
    assert Decimal(spent["value"][1]) < Decimal(BUDGET["acme"])

    # The tenants dashboard's live-bill panels show the same: each returns data, and the
    # forecast over the budget is acme's alone.
    from test_prometheus_live import all_panel_targets, check_plausible, substitute

    bill_panels = [(title, unit, expr) for uid, title, _kind, unit, expr in all_panel_targets()
                   if uid == "slicemeter-tenants" and "slicemeter_tenant_month_" in expr]
    assert len(bill_panels) >= 7
    for title, unit, expr in bill_panels:
        result = api.query(substitute(expr, {}))
        if title != "Forecast as a share of the budget":   # a share: over 1 is the point here
            check_plausible(f"tenants / {title}", unit, result)
        # the platform's idle line has money but no budget
        assert {"acme", "globex"} <= {s["metric"]["tenant"] for s in result} <= {"acme", "globex", "platform"}, title
    (share_expr,) = [e for t, _u, e in bill_panels if t == "Forecast as a share of the budget"]
    share = {s["metric"]["tenant"]: float(s["value"][1]) for s in api.query(substitute(share_expr, {}))}
    assert share["acme"] > 1 > share["globex"] > 0
