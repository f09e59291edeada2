"""The fleet and node dashboards' device-health panels against a real Prometheus (Debian's),
scraping simulated exporters of the demo's gpu-node-1 inside two of its faults
(examples/demo.yaml): one exporter's clock (SLICEMETER_NOW) in the hour of Xid 79 on GPU 0,
the other's in the thermal throttling of GPU 2. Every health panel must return plausible
data, and the degraded, throttled and Xid panels must show exactly those two GPUs."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request

import pytest
import yaml

from slicemeter.broker import free_port
from test_prometheus_live import (DASHBOARDS, REPO, SCENARIO, PromAPI, check_plausible, fetch_metrics, panels, poll,
                                  samples_of, stop, substitute)

pytestmark = pytest.mark.prometheus

NODE, TENANT = "gpu-node-1", "acme"
# the demo's faults on gpu-node-1: Xid 79 on GPU 0 from 14:00 every 60 s; GPU 2 throttled from 13:00 for 90 min
CLOCKS = {"xid": "2026-11-12T14:00:50", "throttle": "2026-11-20T13:05:00"}
HEALTH_FAMILIES = ("slicemeter_gpu_temperature_celsius", "slicemeter_gpu_power_watts", "slicemeter_gpu_throttled",
                   "slicemeter_gpu_xid_errors_total", "slicemeter_gpu_ecc_errors_total", "slicemeter_gpu_lost")


def health_targets() -> list[tuple[str, str, str, str, str]]:
    """(dashboard uid, panel title, type, unit, expr) of every panel under a "Device health" row."""
    out = []
    for path in DASHBOARDS:
        d = json.loads(path.read_text())
        in_health = False
        for p in d["panels"]:
            if p["type"] == "row":
                in_health = p["title"] == "Device health"
                continue
            if in_health:
                unit = p["fieldConfig"]["defaults"].get("unit", "none")
                out += [(d["uid"], p["title"], p["type"], unit, t["expr"]) for t in p["targets"]]
    return out


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("health-live")
    procs, ports = [], {}
    try:
        for name, now in CLOCKS.items():
            port = free_port()
            log = open(tmp / f"exporter-{name}.log", "wb")
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "slicemeter.cli", "exporter", "--simulate", str(SCENARIO), "--node", NODE,
                 "--tenant", TENANT, "--hami-dir", str(tmp / name / "hami"), "--spool-dir", str(tmp / name / "spool"),
                 "--port", str(port), "--listen", "127.0.0.1", "--interval", "1"],
                stdout=subprocess.DEVNULL, stderr=log, cwd=REPO, env={**os.environ, "SLICEMETER_NOW": now}))
            ports[name] = port
        for name, port in ports.items():
            poll(lambda: "slicemeter_gpu_temperature_celsius{" in fetch_metrics(port), f"exporter {name}", timeout=60)
        port = free_port()
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                  "scrape_configs": [{"job_name": "slicemeter-exporter", "honor_labels": True, "static_configs": [
                      {"targets": [f"127.0.0.1:{p}"], "labels": {"node": NODE}} for p in ports.values()]}]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = open(tmp / "prometheus.log", "wb")
        procs.append(subprocess.Popen(
            [shutil.which("prometheus") or "prometheus", f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT))
        api = PromAPI(f"http://127.0.0.1:{port}")
        poll(lambda: urllib.request.urlopen(f"{api.base}/-/ready", timeout=1).status == 200, "Prometheus to be ready")
        # the Xid arrives at the spell's next minute: wait until Prometheus has seen it counted up
        poll(lambda: api.query('increase(slicemeter_gpu_xid_errors_total{xid="79"}[1m]) > 0'),
             "Xid 79 counted in Prometheus", timeout=90)
        poll(lambda: len(api.query("count_over_time(up[1m]) >= 3 and up == 1")) == len(ports), "three scrapes each")
        yield api, ports
    finally:
        for proc in procs:
            stop(proc)


def test_the_exporters_are_inside_the_faults(prom):
    _api, ports = prom
    xid = samples_of(fetch_metrics(ports["xid"]), "slicemeter_gpu_xid_errors_total")
    assert any(labels["xid"] == "79" and labels["gpu_index"] == "0" and v > 0 for labels, v in xid)
    throttled = {labels["gpu_index"]: v for labels, v in
                 samples_of(fetch_metrics(ports["throttle"]), "slicemeter_gpu_throttled")}
    assert throttled["2"] == 1 and sum(throttled.values()) == 1


def test_every_health_panel_returns_plausible_data(prom):
    api, _ports = prom
    targets = health_targets()
    assert {uid for uid, *_ in targets} == {"slicemeter-fleet", "slicemeter-node"} and len(targets) >= 20
    read = {f for *_, expr in targets for f in HEALTH_FAMILIES if f in expr}
    assert read == set(HEALTH_FAMILIES)
    for uid, title, kind, unit, expr in targets:
        q = substitute(expr, {})
        check_plausible(f"{uid} / {title}: {q}", unit, api.query(q))
        if kind == "timeseries":
            check_plausible(f"{uid} / {title} (range): {q}", unit, api.query_range(q))


def value_of(api, uid: str, title: str, values: dict | None = None) -> list[dict]:
    (expr,) = [e for u, t, _k, _unit, e in health_targets() if u == uid and t == title]
    return api.query(substitute(expr, values or {}))


def test_degraded_throttled_and_xid_panels_name_the_faulty_gpus(prom):
    api, _ports = prom
    (degraded,) = value_of(api, "slicemeter-fleet", "Degraded GPUs now")
    assert float(degraded["value"][1]) == 2            # GPU 0 (Xid 79) and GPU 2 (throttled)
    (throttled,) = value_of(api, "slicemeter-fleet", "Throttled GPUs now")
    assert float(throttled["value"][1]) == 1
    (xids,) = value_of(api, "slicemeter-fleet", "Critical Xids (range)")
    assert float(xids["value"][1]) > 0
    by_code = value_of(api, "slicemeter-node", "Xid events by code")
    assert {(s["metric"]["gpu_index"], s["metric"]["xid"]) for s in by_code if float(s["value"][1]) > 0} == {("0", "79")}
    per_gpu = {s["metric"]["gpu_index"]: float(s["value"][1]) for s in value_of(api, "slicemeter-node", "Throttled")}
    assert per_gpu["2"] == 1 and sum(per_gpu.values()) == 1
    # the model variable filters: the node's A100s have the faults, no other model is listed
    model = api.query("group by (model) (slicemeter_gpu_memory_total_bytes)")[0]["metric"]["model"]
    (filtered,) = value_of(api, "slicemeter-fleet", "Degraded GPUs now", {"model": model})
    assert float(filtered["value"][1]) == 2
    (other,) = value_of(api, "slicemeter-fleet", "Degraded GPUs now", {"model": "no such model"})
    assert float(other["value"][1]) == 0
