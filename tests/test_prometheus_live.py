"""The rules and every Grafana panel against a real Prometheus (Debian's `prometheus`).

Prometheus scrapes two real simulated exporters (`slicemeter exporter --simulate
examples/demo.yaml`, nodes of two tenants, publishing to a Tansu broker) every second and
evaluates the rules every second. Once a few scrapes and rule evaluations are in, each
panel's PromQL (template variables set to All, then to each of their values) and each
recording rule must return series with plausible values, every alert rule must evaluate
without error, and exactly the alerts the exporters' numbers call for must be pending.

The exporters tick once (--interval 3600) so that their /metrics stay fixed while the test
compares Prometheus' results with numbers computed here from the same exposition. A real
`slicemeter ingest --metrics-port` consumes their Ticks from the broker into DuckDB and is
scraped too; with --recommend-interval it also serves the right-sizing headline figures,
planned from its snapshot.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from slicemeter.broker import TansuBroker, free_port

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parent.parent
RULE_FILES = sorted((REPO / "prometheus" / "rules").glob("*.yml"))
DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))
SCENARIO = REPO / "examples" / "demo.yaml"
NODES = {"gpu-node-1": "acme", "gpu-node-3": "globex"}  # one node of each of two tenants
VARIABLES = ("tenant", "namespace", "node", "model", "gpu")
# Grafana's interval variables, as a dashboard over the last minutes would set them.
INTERVALS = {"$__rate_interval": "1m", "$__range": "1m", "$__interval": "1s"}
PERCENT_UNITS = {"percentunit"}


# --- a thin client for Prometheus' HTTP API --------------------------------------------------

class PromAPI:
    def __init__(self, base: str):
        self.base = base

    def get(self, path: str, **params) -> dict:
        url = f"{self.base}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = json.load(r)
        except urllib.error.HTTPError as exc:  # 400/422 carry the PromQL error as JSON
            body = json.load(exc)
        return body

    def query(self, expr: str) -> list[dict]:
        body = self.get("/api/v1/query", query=expr)
        assert body["status"] == "success", f"{expr!r}: {body.get('errorType')}: {body.get('error')}"
        return body["data"]["result"]

    def query_range(self, expr: str, seconds: int = 20) -> list[dict]:
        end = time.time()
        body = self.get("/api/v1/query_range", query=expr, start=end - seconds, end=end, step="1s")
        assert body["status"] == "success", f"{expr!r}: {body.get('errorType')}: {body.get('error')}"
        return body["data"]["result"]


def poll(condition, what: str, timeout: float = 30.0):
    """Return condition()'s first truthy value; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if value := condition():
                return value
        except (OSError, ValueError, KeyError, AssertionError) as exc:
            last_exc = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last error: {last_exc})")


def rules_of(kind: str) -> list[dict]:
    out = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out += [r for r in group["rules"] if kind in r]
    return out


# --- the processes: exporters, ingest, Prometheus ------------------------------------------

def start(tmp: Path, name: str, argv: list[str]) -> tuple[subprocess.Popen, Path]:
    """`slicemeter ARGV...` as a child process, stderr to tmp/name.log."""
    log = tmp / f"{name}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "slicemeter.cli", *argv],
                                stdout=subprocess.DEVNULL, stderr=err, cwd=REPO)
    return proc, log


def wait_for_metrics(proc: subprocess.Popen, log: Path, port: int, ready, what: str, timeout: float = 30.0) -> str:
    """The process' /metrics text once ready(text) holds; fails at once if the process dies."""
    def check():
        if proc.poll() is not None:  # not an AssertionError: poll() must not wait it out
            raise RuntimeError(f"{what} exited: {log.read_text()[-2000:]}")
        text = fetch_metrics(port)
        return text if ready(text) else None
    return poll(check, what, timeout)


def samples_of(text: str, name: str) -> list[tuple[dict, float]]:
    return [(smp.labels, smp.value) for fam in text_string_to_metric_families(text)
            for smp in fam.samples if smp.name == name]


def fetch_metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
        return r.read().decode()


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """Two simulated exporters -> Tansu -> ingest; yields {"exporters": {node: (port, /metrics
    text)}, "ingest": port} once ingest has stored both exporters' first Tick."""
    tmp = tmp_path_factory.mktemp("pipeline")
    procs = []
    with TansuBroker(log_path=tmp / "tansu.log") as broker:
        try:
            started = {}
            for node, tenant in NODES.items():
                port = free_port()
                proc, log = start(tmp, f"exporter-{node}", [
                    "exporter", "--simulate", str(SCENARIO), "--node", node, "--tenant", tenant,
                    "--hami-dir", str(tmp / node / "hami"), "--spool-dir", str(tmp / node / "spool"),
                    "--kafka", broker.bootstrap, "--port", str(port), "--listen", "127.0.0.1",
                    "--interval", "3600"])
                procs.append(proc)
                started[node] = (proc, log, port)
            ingest_port = free_port()
            snapshot = tmp / "snapshot.duckdb"
            ingest, ingest_log = start(tmp, "ingest", [
                "ingest", "--kafka", broker.bootstrap, "--db", str(tmp / "slicemeter.duckdb"),
                "--tenants", str(SCENARIO), "--metrics-port", str(ingest_port),
                "--snapshot", str(snapshot), "--snapshot-interval", "1", "--recommend-interval", "1",
                "--bill-interval", "1"])
            procs.append(ingest)
            exporters = {node: (port, wait_for_metrics(proc, log, port,
                                                       lambda text: "slicemeter_gpu_memory_total_bytes{" in text,
                                                       f"exporter {node}'s first Tick"))
                         for node, (proc, log, port) in started.items()}
            # One Tick each: a row per GPU and per slice.
            rows = sum(len(samples_of(text, "slicemeter_gpu_memory_total_bytes"))
                       + len(samples_of(text, "slicemeter_slice_allocation_ratio")) for _, text in exporters.values())
            # Ingest's first group join takes about half its session timeout with Tansu.
            wait_for_metrics(ingest, ingest_log, ingest_port,
                             lambda text: sum(v for _, v in samples_of(text, "slicemeter_ingest_samples_total")) >= rows,
                             "ingest to store both exporters' first Tick", timeout=45)
            wait_for_metrics(ingest, ingest_log, ingest_port,
                             lambda text: "slicemeter_recommend_monthly_saving{" in text,
                             "ingest's first right-sizing figures")
            wait_for_metrics(ingest, ingest_log, ingest_port,
                             lambda text: "slicemeter_tenant_month_forecast_charge{" in text,
                             "ingest's first live bill")
            yield {"exporters": exporters, "ingest": ingest_port, "rows": rows, "snapshot": snapshot}
        finally:
            for proc in procs:
                stop(proc)


@pytest.fixture(scope="module")
def exporters(pipeline):
    return pipeline["exporters"]


@pytest.fixture(scope="module")
def prom(tmp_path_factory, pipeline):
    tmp = tmp_path_factory.mktemp("prometheus")
    exporters = pipeline["exporters"]
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in RULE_FILES],
        "scrape_configs": [
            # As in prometheus/prometheus.yml: the node as a target label, the exporter's own wins.
            {"job_name": "slicemeter-exporter", "honor_labels": True,
             "static_configs": [{"targets": [f"127.0.0.1:{p}"], "labels": {"node": node}}
                                for node, (p, _) in exporters.items()]},
            {"job_name": "slicemeter-ingest",
             "static_configs": [{"targets": [f"127.0.0.1:{pipeline['ingest']}"]}]},
        ],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    api = PromAPI(f"http://127.0.0.1:{port}")
    targets = len(exporters) + 1
    try:
        poll(lambda: urllib.request.urlopen(f"{api.base}/-/ready", timeout=1).status == 200, "Prometheus to be ready")
        # Every target scraped at least three times (rate() needs two samples in its window)...
        poll(lambda: len(api.query("count_over_time(up[1m]) >= 3 and up == 1")) == targets,
             "three scrapes of every target")
        # ...and every recording rule evaluated twice after data arrived.
        poll(lambda: all(api.query(f"count_over_time({r['record']}[1m]) >= 2") for r in rules_of("record")),
             "two evaluations of every recording rule")
        yield api
    finally:
        stop(proc)
        log.close()


# --- helpers over dashboards ----------------------------------------------------------------

def panels(dashboard: dict) -> list[dict]:
    out = []
    for p in dashboard["panels"]:
        out.append(p)
        out += p.get("panels", [])  # panels inside collapsed rows
    return [p for p in out if p.get("targets")]


def all_panel_targets() -> list[tuple[str, str, str, str, str]]:
    """(dashboard uid, panel title, panel type, unit, expr) for every target of every panel."""
    out = []
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        for p in panels(d):
            unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "none")
            out += [(d["uid"], p["title"], p["type"], unit, t["expr"]) for t in p["targets"]]
    return out


def substitute(expr: str, values: dict[str, str]) -> str:
    for k, v in INTERVALS.items():
        expr = expr.replace(k, v)
    for name in VARIABLES:
        expr = re.sub(rf"\$\{{{name}(:\w+)?\}}|\${name}\b", values.get(name, ".*"), expr)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def label_values(api: PromAPI, query: str, values: dict[str, str]) -> list[str]:
    """Grafana's label_values(selector, label), run through the query API."""
    m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query.strip())
    assert m, f"variable query {query!r} is not label_values(selector, label)"
    selector, label = substitute(m.group(1), values), m.group(2)
    return sorted({s["metric"][label] for s in api.query(f"group by ({label}) ({selector})")})


def check_plausible(where: str, unit: str, result: list[dict]) -> None:
    assert result, f"{where}: no series"
    for series in result:
        samples = [series["value"]] if "value" in series else series["values"]
        for _, raw in samples:
            v = float(raw)
            assert math.isfinite(v), f"{where}: {series['metric']} = {raw}"
            assert v >= 0, f"{where}: {series['metric']} = {v} < 0"
            if unit in PERCENT_UNITS:
                assert v <= 1 + 1e-9, f"{where}: ratio {series['metric']} = {v} > 1"


# --- tests ----------------------------------------------------------------------------------

def test_dashboards_have_panels_to_check():
    targets = all_panel_targets()
    assert {uid for uid, *_ in targets} == {"slicemeter-fleet", "slicemeter-tenants", "slicemeter-node"}
    assert len(targets) >= 40


def test_every_panel_returns_plausible_data_with_all_selected(prom):
    for uid, title, kind, unit, expr in all_panel_targets():
        q = substitute(expr, {})
        check_plausible(f"{uid} / {title}: {q}", unit, prom.query(q))
        if kind == "timeseries":
            check_plausible(f"{uid} / {title} (range): {q}", unit, prom.query_range(q))


def test_every_variable_lists_values_and_each_value_filters_the_panels(prom):
    variables = {}
    for path in DASHBOARDS:
        for v in json.loads(path.read_text())["templating"]["list"]:
            if v["type"] == "query":
                variables.setdefault(v["name"], v["query"]["query"])
    assert set(variables) == set(VARIABLES)
    for name, query in variables.items():
        values = label_values(prom, query, {})
        assert values, f"variable {name}: {query} lists nothing"
        filled: dict[str, set[str]] = {}
        for value in values:
            chosen = {name: value}  # Grafana inserts a single value as is
            for uid, title, kind, unit, expr in all_panel_targets():
                if f"${name}" not in expr:
                    continue
                q = substitute(expr, chosen)
                result = prom.query(q)
                filled.setdefault(f"{uid} / {title}: {expr}", set())
                if not result:
                    continue  # e.g. a GPU without slices: an empty slice table is right
                filled[f"{uid} / {title}: {expr}"].add(value)
                check_plausible(f"{uid} / {title} with {name}={value}: {q}", unit, result)
                for series in result:  # a filtered panel shows only the chosen value
                    label = "gpu_uuid" if name == "gpu" else name
                    if label in series["metric"]:
                        assert series["metric"][label] == value, f"{q}: {series['metric']}"
        empty = [panel for panel, vals in filled.items() if not vals]
        assert not empty, f"no value of ${name} fills {empty}"


def test_every_recording_rule_returns_plausible_series(prom):
    for rule in rules_of("record"):
        result = prom.query(rule["record"])
        unit = "percentunit" if rule["record"].endswith(":ratio") else "none"
        check_plausible(f"recording rule {rule['record']}", unit, result)


def samples(exporters, name: str) -> list[tuple[dict, float]]:
    return [sample for _, text in exporters.values() for sample in samples_of(text, name)]


def test_ingest_stored_every_row_the_exporters_published(prom, pipeline):
    (stored,) = prom.query("slicemeter_ingest_samples_total")
    assert float(stored["value"][1]) == pipeline["rows"] > 0
    lag = prom.query("slicemeter_ingest_lag_messages")
    assert lag and all(float(s["value"][1]) == 0 for s in lag)


def test_recommend_figures_are_the_snapshot_plan(prom, pipeline):
    """The exporters tick once, so the snapshot's plan for this month stays the one served."""
    from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
    from slicemeter.rightsizing.plan import build_plan
    from slicemeter.store import connect

    con = connect(pipeline["snapshot"], read_only=True)
    try:
        summary = build_plan(con, time.strftime("%Y-%m", time.gmtime()), 0.2, load_prices(DEFAULT_PRICES)).summary
    finally:
        con.close()
    assert summary["gpus_total"] > 0
    (freeable,) = prom.query("slicemeter_recommend_freeable_gpus")
    assert float(freeable["value"][1]) == summary["gpus_freeable"]
    (saving,) = prom.query("slicemeter_recommend_monthly_saving")
    assert saving["metric"]["currency"] == "USD"
    assert float(saving["value"][1]) == float(summary["monthly_saving"])


def test_recorded_fractions_match_the_exporters_numbers(prom, exporters):
    allocated = samples(exporters, "slicemeter_gpu_allocated_ratio")
    used = samples(exporters, "slicemeter_gpu_used_ratio")
    tenants = {labels["tenant"] for labels, _ in allocated}
    assert tenants == set(NODES.values())
    got_alloc = {s["metric"]["tenant"]: float(s["value"][1]) for s in prom.query("tenant:slicemeter_gpu_allocated:ratio")}
    got_used = {s["metric"]["tenant"]: float(s["value"][1]) for s in prom.query("tenant:slicemeter_gpu_used:ratio")}
    assert set(got_alloc) == set(got_used) == tenants
    for t in tenants:
        a = [v for labels, v in allocated if labels["tenant"] == t]
        u = [v for labels, v in used if labels["tenant"] == t]
        assert got_alloc[t] == pytest.approx(sum(a) / len(a))
        assert got_used[t] == pytest.approx(sum(u) / len(u))
    assert any(0 < v < 1 for v in got_used.values())  # not a degenerate fleet
    idle = {s["metric"]["gpu_uuid"]: float(s["value"][1]) for s in prom.query("gpu:slicemeter_gpu_idle:ratio")}
    assert idle == {labels["gpu_uuid"]: pytest.approx(1 - v) for labels, v in used}
    waste = {(s["metric"]["pod"], s["metric"]["container"], s["metric"]["gpu_uuid"]): float(s["value"][1])
             for s in prom.query("slice:slicemeter_slice_allocated_unused:ratio")}
    usage = {(l["pod"], l["container"], l["gpu_uuid"]): v for l, v in samples(exporters, "slicemeter_slice_usage_ratio")}
    expected = {k: pytest.approx(max(0.0, min(1.0, v - usage[k])))
                for k, v in ((( l["pod"], l["container"], l["gpu_uuid"]), v)
                             for l, v in samples(exporters, "slicemeter_slice_allocation_ratio"))}
    assert waste == expected and len(waste) >= 4


def test_alert_rules_evaluate_without_error(prom):
    alerts = rules_of("alert")
    assert len(alerts) >= 6
    for rule in alerts:
        prom.query(rule["expr"])  # parses and evaluates (an empty result is fine here)
    states = {}
    for group in prom.get("/api/v1/rules")["data"]["groups"]:
        for r in group["rules"]:
            assert r["health"] == "ok", f"{r['name']}: {r.get('lastError')}"
            assert not r["lastEvaluation"].startswith("0001"), f"{r['name']} never evaluated"
            states[r["name"]] = r
    assert {r["alert"] for r in alerts} <= set(states)


def expected_pending(exporters) -> set[tuple[str, str, str]]:
    """The alerts the exporters' numbers call for, by the rules' own definitions."""
    def key(labels):
        return labels["node"], labels["pod"], labels["container"], labels["gpu_uuid"]

    sm = {key(l): v for l, v in samples(exporters, "slicemeter_slice_sm_utilization_ratio")}
    age = {key(l): v for l, v in samples(exporters, "slicemeter_slice_last_kernel_age_seconds")}
    out = set()
    for labels, alloc in samples(exporters, "slicemeter_slice_allocation_ratio"):
        k = key(labels)
        if alloc > 0 and (sm.get(k, 1.0) < 0.01 or age.get(k, 0.0) > 3 * 3600):
            out.add(("SlicemeterSliceAllocatedIdle", labels["node"], labels["pod"]))
    for labels, v in samples(exporters, "slicemeter_slice_memory_disagreement"):
        if v == 1:
            out.add(("SlicemeterMemoryDisagreement", labels["node"], labels["pod"]))
    for labels, v in samples(exporters, "slicemeter_hami_region_ok"):
        if v == 0:
            out.add(("SlicemeterHamiRegionUnreadable", labels["node"], labels["pod"]))
    return out


def test_exactly_the_alerts_the_numbers_call_for_are_pending(prom, exporters):
    expected = expected_pending(exporters)
    # The demo fleet has idle reservations; an empty expectation would prove nothing.
    assert any(name == "SlicemeterSliceAllocatedIdle" for name, *_ in expected)
    def pending():
        alerts = prom.get("/api/v1/alerts")["data"]["alerts"]
        return alerts, {(a["labels"]["alertname"], a["labels"].get("node"), a["labels"].get("pod")) for a in alerts}

    # Rule groups evaluate independently: give each a few evaluations to catch up.
    deadline = time.monotonic() + 10
    while (found := pending())[1] != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    alerts, names = found
    assert names == expected
    # Every rule has `for:` or fires on a counter's increase, which a fresh server cannot see.
    assert {a["state"] for a in alerts} == {"pending"}
