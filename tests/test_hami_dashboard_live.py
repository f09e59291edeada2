"""HAMi's own vGPU dashboard and HAMi-WebUI's container query against a real Prometheus
(Debian's) scraping two exporters in Prometheus-only mode (no --kafka) with --hami-metrics full.

The dashboard is HAMi v2.10's dashboards/hami-vgpu-dashboard.json (tests/data, with its
NOTICE and LICENSE). HAMi-WebUI's query for a container's SM use is the one
server/internal/exporter/exporter.go (taskCoreUsed, NVIDIA) builds, at Project-HAMi/HAMi-WebUI
commit 8f42445d325736655d467842cb762b75f2612d25:
    sum_over_time(X[1m]) == 0 or (sum_over_time(X[10m:]) / count_over_time(( X !=0)[10m:]))
with X = hami_container_device_utilization_ratio{device_uuid, namespace, pod, container}.

The exporters tick once (--interval 3600), so /metrics stays fixed while Prometheus' answers
are compared with it.
"""
from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from slicemeter.broker import free_port
from test_prometheus_live import PromAPI, fetch_metrics, poll, samples_of, start, stop, wait_for_metrics

pytestmark = pytest.mark.prometheus

DASHBOARD = Path(__file__).resolve().parent / "data" / "hami-vgpu-dashboard.json"
WEBUI_CORE_USED = ("sum_over_time({x}[1m]) == 0 or (sum_over_time({x}[10m:]) / count_over_time(( {x} !=0)[10m:])) ")
SCENARIO = """
tenants:
  - {name: acme, display_name: ACME, kamaji: {namespace: tenant-acme, name: acme},
     api_server: 'https://acme.tenants.example:6443', cost_center: CC-1}
nodes:
  - name: node-a
    tenant: acme
    gpus: [{model: "NVIDIA A100-SXM4-80GB", count: 2}]
    pods:
      - name: trainer
        namespace: ml
        containers:
          - name: main
            resources: {nvidia.com/gpumem: 30720, nvidia.com/gpucores: 40}
            workload: {pattern: steady-training, level: 0.8}
      - name: ddp
        namespace: ml
        containers:
          - name: worker
            resources: {nvidia.com/gpu: 2, nvidia.com/gpumem: 20480, nvidia.com/gpucores: 30}
            workload: {pattern: steady-training, level: 0.6}
      - name: reserved
        namespace: notebooks
        containers:
          - name: lab
            resources: {nvidia.com/gpumem: 8192, nvidia.com/gpucores: 10}
            workload: idle-reservation
  - name: node-b
    tenant: acme
    gpus: [{model: "NVIDIA L4", count: 1}]
    pods:
      - name: chat
        namespace: serving
        containers:
          - name: server
            resources: {nvidia.com/gpumem: 8192, nvidia.com/gpucores: 50}
            workload: {pattern: steady-training, level: 0.5}
"""
NODES = ("node-a", "node-b")


def dashboard_targets() -> list[tuple[str, str, str]]:
    """(panel title, unit, expr) of every target of every panel, rows included."""
    d = json.loads(DASHBOARD.read_text())
    out = []
    stack = list(d["panels"])
    while stack:
        p = stack.pop(0)
        stack += p.get("panels", [])
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "none")
        out += [(p["title"], unit, t["expr"]) for t in p.get("targets", [])]
    return out


def dashboard_variables() -> dict[str, str]:
    d = json.loads(DASHBOARD.read_text())
    return {v["name"]: v["query"]["query"] for v in d["templating"]["list"] if v["type"] == "query"}


def substitute(expr: str, values: dict[str, list[str]]) -> str:
    """Grafana's substitution of a multi-value variable into a regex matcher: (a|b|...)."""
    for name, chosen in values.items():
        assert all(re.fullmatch(r"[\w-]+", v) for v in chosen), chosen   # nothing a regex would need escaped
        expr = expr.replace(f"${name}", "(" + "|".join(chosen) + ")")
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


@pytest.fixture(scope="module")
def exporters(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hami-live")
    (tmp / "scenario.yaml").write_text(SCENARIO)
    procs, out = [], {}
    try:
        for node in NODES:
            port = free_port()
            proc, log = start(tmp, f"exporter-{node}", [
                "exporter", "--simulate", str(tmp / "scenario.yaml"), "--node", node, "--tenant", "acme",
                "--hami-dir", str(tmp / node / "hami"), "--spool-dir", str(tmp / node / "spool"),
                "--port", str(port), "--listen", "127.0.0.1", "--interval", "3600", "--hami-metrics", "full"])
            procs.append(proc)
            text = wait_for_metrics(proc, log, port, lambda t: "hami_gpu_memory_limit_bytes{" in t, f"exporter {node}")
            out[node] = (port, text, tmp / node / "spool")
        yield out
    finally:
        for proc in procs:
            stop(proc)


@pytest.fixture(scope="module")
def prom(tmp_path_factory, exporters):
    tmp = tmp_path_factory.mktemp("hami-prometheus")
    port = free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        # as HAMi's monitor is scraped: the exporter's own labels, no target labels of ours
        "scrape_configs": [{"job_name": "hami-vgpu", "static_configs": [
            {"targets": [f"127.0.0.1:{p}" for p, _, _ in exporters.values()]}]}],
    }
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    log = open(tmp / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [shutil.which("prometheus") or "prometheus", f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT)
    api = PromAPI(f"http://127.0.0.1:{port}")
    try:
        poll(lambda: len(api.query("count_over_time(up[1m]) >= 3 and up == 1")) == len(exporters),
             "three scrapes of every exporter")
        yield api
    finally:
        stop(proc)
        log.close()


def test_prometheus_only_mode_publishes_nothing(exporters):
    for port, text, spool in exporters.values():
        assert "slicemeter_published_ticks_total 0\n" in fetch_metrics(port)
        assert not spool.exists() or not any(spool.iterdir())


def test_every_expression_of_hamis_dashboard_returns_series(prom, exporters):
    targets = dashboard_targets()
    assert len(targets) == 17                        # HAMi v2.10's dashboard: 17 queries in 15 panels
    variables = dashboard_variables()
    assert set(variables) == {"node", "namespace"}
    values = {}
    for name, query in variables.items():
        m = re.fullmatch(r"label_values\((\w+), (\w+)\)", query)
        values[name] = sorted({s["metric"][m.group(2)] for s in prom.query(f"group by ({m.group(2)}) ({m.group(1)})")})
    assert values["node"] == list(NODES) and values["namespace"] == ["ml", "notebooks", "serving"]
    percents: dict[str, float] = {}
    for title, unit, expr in targets:
        q = substitute(expr, values)
        for result in (prom.query(q), prom.query_range(q)):
            assert result, f"{title}: {q} returns no series"
            for series in result:
                for _, raw in [series["value"]] if "value" in series else series["values"]:
                    v = float(raw)
                    assert math.isfinite(v) and v >= 0, f"{title}: {series['metric']} = {raw}"
                    if unit == "percent":
                        assert v <= 100, f"{title}: {series['metric']} = {v} is not a percent"
                        percents[title] = max(percents.get(title, 0.0), v)
    # the utilization panels read percent, not a 0..1 ratio
    assert percents["Host GPU utilization"] > 1 and percents["Container device utilization"] > 1
    # cores granted on a GPU, in percent: the sum of its containers' grants
    per_gpu: dict[str, float] = {}
    for _, text, _ in exporters.values():
        for labels, v in samples_of(text, "hami_vgpu_core_allocated_ratio"):
            per_gpu[labels["device_uuid"]] = per_gpu.get(labels["device_uuid"], 0.0) + v
    assert percents["GPU core allocated ratio"] == max(per_gpu.values()) >= 50


def test_each_node_and_namespace_value_fills_its_panels(prom):
    variables = {"node": ["node-a", "node-b"], "namespace": ["ml", "notebooks", "serving"]}
    for title, unit, expr in dashboard_targets():
        for name, chosen in variables.items():
            if f"${name}" not in expr:
                continue
            for value in chosen:
                q = substitute(expr, {**variables, name: [value]})
                result = prom.query(q)
                assert result, f"{title} with {name}={value}: {q}"
                for series in result:
                    assert series["metric"].get(name, value) == value, f"{q}: {series['metric']}"


def test_hami_webui_reads_a_containers_sm_use_in_percent(prom, exporters):
    text = exporters["node-a"][1]
    util = {(l["namespace"], l["pod"], l["container"], l["device_uuid"]): v
            for l, v in samples_of(text, "hami_container_device_utilization_ratio")}
    ratio = {(l["namespace"], l["pod"], l["container"], l["gpu_uuid"]): v
             for l, v in samples_of(text, "slicemeter_slice_sm_utilization_ratio")}
    busy = [k for k, v in util.items() if v > 1]
    idle = [k for k, v in util.items() if v == 0]
    assert busy and idle
    for key in busy + idle:
        ns, pod, container, uuid = key
        x = (f'hami_container_device_utilization_ratio{{device_uuid="{uuid}", namespace="{ns}", pod="{pod}", '
             f'container="{container}"}}')
        (series,) = prom.query(WEBUI_CORE_USED.format(x=x))
        got = float(series["value"][1])
        assert got == pytest.approx(util[key]) == pytest.approx(100 * ratio[key]), key   # percent of the GPU
