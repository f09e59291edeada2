"""The rules and every Grafana panel against a real Prometheus (Debian's `prometheus`).

Prometheus scrapes metrics over loopback HTTP every second and evaluates the rules every
second; once a few scrapes and rule evaluations are in, each panel's PromQL (template
variables set to All, then each variable to a real value) and each recording rule must
return series with plausible values, and every alert rule must evaluate without error.

The exporter's metrics come from tests/data/exporter_metrics.prom, a recorded exposition of
two simulated nodes with every docs/metrics.md family; ingest's from
tests/data/ingest_metrics.prom. Both are served by a small stand-in HTTP server.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from slicemeter.broker import free_port

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
RULE_FILES = sorted((REPO / "prometheus" / "rules").glob("*.yml"))
DASHBOARDS = sorted((REPO / "grafana" / "dashboards").glob("*.json"))
VARIABLES = ("tenant", "namespace", "node", "gpu")
# Grafana's interval variables, as a dashboard over the last minutes would set them.
INTERVALS = {"$__rate_interval": "1m", "$__range": "1m", "$__interval": "1s"}
PERCENT_UNITS = {"percentunit"}


# --- stand-in HTTP server for the recorded expositions --------------------------------------

def serve_text(text: str) -> ThreadingHTTPServer:
    body = text.encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # keep pytest output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


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


# --- the server -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prometheus")
    exporter = serve_text((DATA / "exporter_metrics.prom").read_text())
    ingest = serve_text((DATA / "ingest_metrics.prom").read_text())
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in RULE_FILES],
        "scrape_configs": [
            {"job_name": "slicemeter-exporter",
             "static_configs": [{"targets": [f"127.0.0.1:{exporter.server_port}"]}]},
            {"job_name": "slicemeter-ingest",
             "static_configs": [{"targets": [f"127.0.0.1:{ingest.server_port}"]}]},
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
    try:
        poll(lambda: urllib.request.urlopen(f"{api.base}/-/ready", timeout=1).status == 200,
             "Prometheus to be ready")
        # Both targets scraped at least three times (rate() needs two samples in its window)...
        poll(lambda: len(api.query("count_over_time(up[1m]) >= 3 and up == 1")) == 2, "three scrapes of both targets")
        # ...and every rule evaluated after data arrived (recording rules produce series).
        poll(lambda: all(api.query(f"count_over_time({r['record']}[1m]) >= 2") for r in rules_of("record")),
             "two evaluations of every recording rule")
        yield api
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
        exporter.shutdown()
        ingest.shutdown()
        print((tmp / "prometheus.log").read_text()[-2000:])


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


def test_every_variable_lists_values_and_each_value_keeps_panels_filled(prom):
    variables = {}
    for path in DASHBOARDS:
        for v in json.loads(path.read_text())["templating"]["list"]:
            if v["type"] == "query":
                variables.setdefault(v["name"], v["query"]["query"])
    assert set(variables) == set(VARIABLES)
    for name, query in variables.items():
        values = label_values(prom, query, {})
        assert values, f"variable {name}: {query} lists nothing"
        for value in values[:2]:
            chosen = {name: value}  # Grafana inserts a single value as is
            for uid, title, kind, unit, expr in all_panel_targets():
                if f"${name}" not in expr:
                    continue
                q = substitute(expr, chosen)
                result = prom.query(q)
                check_plausible(f"{uid} / {title} with {name}={value}: {q}", unit, result)
                for series in result:  # a filtered panel shows only the chosen value
                    if name == "gpu" and "gpu_uuid" in series["metric"]:
                        assert series["metric"]["gpu_uuid"] == value
                    elif name in series["metric"]:
                        assert series["metric"][name] == value, f"{q}: {series['metric']}"


def test_every_recording_rule_returns_plausible_series(prom):
    for rule in rules_of("record"):
        result = prom.query(rule["record"])
        unit = "percentunit" if rule["record"].endswith(":ratio") else "none"
        check_plausible(f"recording rule {rule['record']}", unit, result)


def _recorded(name: str) -> list[tuple[dict, float]]:
    text = (DATA / "exporter_metrics.prom").read_text()
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_tenant_fractions_match_the_recorded_gpus(prom):
    allocated = _recorded("slicemeter_gpu_allocated_ratio")
    used = _recorded("slicemeter_gpu_used_ratio")
    tenants = {labels["tenant"] for labels, _ in allocated}
    assert len(tenants) >= 2
    got_alloc = {s["metric"]["tenant"]: float(s["value"][1]) for s in prom.query("tenant:slicemeter_gpu_allocated:ratio")}
    got_used = {s["metric"]["tenant"]: float(s["value"][1]) for s in prom.query("tenant:slicemeter_gpu_used:ratio")}
    for t in tenants:
        a = [v for labels, v in allocated if labels["tenant"] == t]
        u = [v for labels, v in used if labels["tenant"] == t]
        assert got_alloc[t] == pytest.approx(sum(a) / len(a))
        assert got_used[t] == pytest.approx(sum(u) / len(u))
    idle = {s["metric"]["gpu_uuid"]: float(s["value"][1]) for s in prom.query("gpu:slicemeter_gpu_idle:ratio")}
    assert idle == {labels["gpu_uuid"]: pytest.approx(1 - v) for labels, v in used}


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


def test_alerts_go_pending_for_the_recorded_idle_and_disagreeing_slices(prom):
    body = poll(lambda: (b := prom.get("/api/v1/alerts"))["data"]["alerts"] and b, "pending alerts")
    pending = {(a["labels"]["alertname"], a["labels"].get("pod")) for a in body["data"]["alerts"]}
    # jupyter-alice ran no kernel for 4 h, detector-b never ran one; llm-serve's HAMi and NVML
    # memory disagree; detector-b's HAMi region was rejected. Busy slices raise nothing.
    assert pending == {
        ("SlicemeterSliceAllocatedIdle", "jupyter-alice"),
        ("SlicemeterSliceAllocatedIdle", "detector-b"),
        ("SlicemeterMemoryDisagreement", "llm-serve-5d8f"),
        ("SlicemeterHamiRegionUnreadable", "detector-b"),
    }
    assert {a["state"] for a in body["data"]["alerts"]} == {"pending"}
