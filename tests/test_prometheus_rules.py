"""Static checks of prometheus/ and grafana/: promtool, the metrics contract, dashboard shape.

The live behaviour (every panel and rule returning data) is tests/test_prometheus_live.py.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.prometheus

REPO = Path(__file__).resolve().parent.parent
PROM = REPO / "prometheus"
RULE_FILES = sorted((PROM / "rules").glob("*.yml"))
RULE_TESTS = sorted((PROM / "tests").glob("*.yml"))
DASHBOARD_DIR = REPO / "grafana" / "dashboards"
TOKEN = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("promtool") or "promtool", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def documented_metrics() -> set[str]:
    return set(re.findall(r"`((?:slicemeter|hami)_[a-z0-9_]+)`", (REPO / "docs" / "metrics.md").read_text()))


def rules() -> list[dict]:
    return [r for p in RULE_FILES for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"]]


def metric_names(expr: str) -> set[str]:
    """Metric and recording-rule names in a PromQL expression (ours only)."""
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values are not names
    return {t for t in TOKEN.findall(expr) if t.startswith(("slicemeter_", "hami_")) or t.count(":") == 2}


def test_promtool_check_rules():
    result = promtool("check", "rules", *map(str, RULE_FILES))
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.findall(r"SUCCESS: (\d+) rules found", result.stdout + result.stderr)


def test_promtool_check_config_of_compose_prometheus():
    result = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(RULE_FILES)} rule files found" in result.stdout + result.stderr


def test_promtool_unit_tests_of_the_alerts():
    result = promtool("test", "rules", *map(str, RULE_TESTS))
    assert result.returncode == 0, result.stdout + result.stderr
    assert (result.stdout + result.stderr).count("SUCCESS") == len(RULE_TESTS) >= 2


def test_every_alert_has_a_unit_test_or_a_live_check():
    tested = {name for path in RULE_TESTS for name in re.findall(r"alertname: (\w+)", path.read_text())}
    live = set(re.findall(r'"(Slicemeter\w+)"', (REPO / "tests" / "test_prometheus_live.py").read_text()))
    alerts = {r["alert"] for r in rules() if "alert" in r}
    assert alerts - (tested | live) == {"SlicemeterSourceErrors", "SlicemeterIngestDeadLetters"}


def test_alerts_carry_severity_and_text():
    for r in rules():
        if "alert" in r:
            assert r["labels"]["severity"] in {"info", "warning", "critical"}, r["alert"]
            assert r["annotations"]["summary"] and r["annotations"]["description"], r["alert"]


def test_rules_and_panels_use_only_documented_metrics_or_recorded_rules():
    known = documented_metrics() | {r["record"] for r in rules() if "record" in r}
    assert "slicemeter_gpu_allocated_ratio" in known
    used = {}
    for r in rules():
        for name in metric_names(r["expr"]):
            used.setdefault(name, f"rule {r.get('record') or r.get('alert')}")
    for path in DASHBOARD_DIR.glob("*.json"):
        d = json.loads(path.read_text())
        for p in d["panels"]:
            for t in p.get("targets", []):
                for name in metric_names(t["expr"]):
                    used.setdefault(name, f"{path.name} / {p['title']}")
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                for name in metric_names(v["query"]["query"]):
                    used.setdefault(name, f"{path.name} variable {v['name']}")
    unknown = {n: where for n, where in used.items() if n not in known}
    assert not unknown, f"not in docs/metrics.md nor a recording rule: {unknown}"
    assert len(used) >= 30


def _generator():
    spec = importlib.util.spec_from_file_location("build_dashboards", REPO / "grafana" / "build_dashboards.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dashboard_json_is_the_generators_output():
    rendered = _generator().render()
    assert sorted(rendered) == sorted(p.name for p in DASHBOARD_DIR.glob("*.json"))
    for name, text in rendered.items():
        assert (DASHBOARD_DIR / name).read_text() == text, f"{name} is stale: python grafana/build_dashboards.py"


def test_dashboards_are_well_formed_for_grafana():
    uids = set()
    for path in DASHBOARD_DIR.glob("*.json"):
        d = json.loads(path.read_text())
        assert d["uid"] not in uids and len(d["uid"]) <= 40
        uids.add(d["uid"])
        names = [v["name"] for v in d["templating"]["list"]]
        assert names[0] == "datasource" and "tenant" in names, path.name
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), path.name
        for p in d["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24, (path.name, p["title"])
            if p["type"] != "row":
                assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
                assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
                refs = [t["refId"] for t in p["targets"]]
                assert len(refs) == len(set(refs)), p["title"]
        builtin = {"__rate_interval", "__range", "__interval", "__all", "value", "labels"}
        used_vars = set(re.findall(r"\$\{?(\w+)", path.read_text())) - builtin
        assert used_vars <= set(names), f"{path.name} uses undefined variables {used_vars - set(names)}"


def test_grafana_provisioning_points_at_the_dashboards_and_prometheus():
    prov = REPO / "grafana" / "provisioning"
    ds = yaml.safe_load((prov / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert [d["type"] for d in ds] == ["prometheus"] and ds[0]["url"] == "http://prometheus:9090"
    providers = yaml.safe_load((prov / "dashboards" / "slicemeter.yml").read_text())["providers"]
    assert providers[0]["options"]["path"] == "/var/lib/grafana/dashboards"
