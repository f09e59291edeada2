"""Writes grafana/dashboards/*.json: `python grafana/build_dashboards.py`.

The dashboards are generated so that every panel follows one layout and one set of template
variables; the JSON is committed (Grafana provisions it as is) and
tests/test_prometheus_dashboards.py checks that it matches this file's output and that every
panel's PromQL returns data from a real Prometheus.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from slicemeter.exporter.serve.catalogue import by_sample_name
from slicemeter.xid import CRITICAL_XIDS

OUT = Path(__file__).resolve().parent / "dashboards"
DS = {"type": "prometheus", "uid": "${datasource}"}

# Label filters, spelled once. Ingest metrics carry no tenant/node labels. The exporter's
# health families are filtered by node only: Prometheus attaches the node as a target label
# (prometheus/prometheus.yml, the ServiceMonitor's relabeling), the exporter may not.
N = 'node=~"$node"'
T = 'tenant=~"$tenant"'
TN = f'{T}, node=~"$node"'
TNS = f'{T}, namespace=~"$namespace"'
NG = f'{T}, node=~"$node", gpu_uuid=~"$gpu"'
NGS = f'{NG}, namespace=~"$namespace"'
TNNS = f'{TN}, namespace=~"$namespace"'   # per container, not per GPU (slicemeter_hami_region_ok)
TNM = f'{TN}, model=~"$model"'
NGM = f'{NG}, model=~"$model"'
CRITICAL = "|".join(str(c) for c in sorted(CRITICAL_XIDS))   # docs/health.md: a degraded hour


def degraded_gpus(sel: str) -> str:
    """PromQL: 1 per GPU that is degraded now (docs/health.md, as the bill counts an hour):
    lost, throttled, or with a critical Xid or an uncorrectable ECC error in the last hour."""
    return (f"max by (node, gpu_uuid) ((slicemeter_gpu_lost{{{sel}}} == 1) or (slicemeter_gpu_throttled{{{sel}}} == 1)"
            f' or (increase(slicemeter_gpu_xid_errors_total{{{sel}, xid=~"{CRITICAL}"}}[1h]) > 0)'
            f' or (increase(slicemeter_gpu_ecc_errors_total{{{sel}, error_type="uncorrected"}}[1h]) > 0))')


def health_panels(sel: str, per: str, legend: str) -> list[dict]:
    """Device health (NVML, docs/health.md): temperature, power, throttling, Xid, ECC, and the
    GPUs degraded now; `per` groups the series (by node on the fleet, by GPU on a node)."""
    return [
        panel("stat", "Degraded GPUs now", [(f"count({degraded_gpus(sel)}) or vector(0)", "GPUs")], "none", w=6,
              description="Lost, throttled, or a critical Xid or an uncorrectable ECC error in the last hour."),
        panel("stat", "Throttled GPUs now", [(f"sum(slicemeter_gpu_throttled{{{sel}}}) or vector(0)", "GPUs")],
              "none", w=6, description="Power cap, HW slowdown, thermal or power brake holding the clocks down."),
        panel("stat", "Critical Xids (range)",
              [(f'sum(increase(slicemeter_gpu_xid_errors_total{{{sel}, xid=~"{CRITICAL}"}}[$__range])) or vector(0)',
                "Xids")], "none", w=6),
        panel("stat", "Hottest GPU", [(f"max(slicemeter_gpu_temperature_celsius{{{sel}}})", "°C")], "celsius", w=6),
        panel("timeseries", "GPU temperature", [(f"max by ({per}) (slicemeter_gpu_temperature_celsius{{{sel}}})",
                                                 legend)], "celsius", w=8),
        panel("timeseries", "GPU power", [(f"max by ({per}) (slicemeter_gpu_power_watts{{{sel}}})", legend)],
              "watt", w=8),
        panel("timeseries", "Throttled", [(f"max by ({per}) (slicemeter_gpu_throttled{{{sel}}})", legend)],
              "none", w=8),
        panel("timeseries", "Xid events by code",
              [(f"sum by ({per}, xid) (increase(slicemeter_gpu_xid_errors_total{{{sel}}}[$__rate_interval]))",
                f"{legend} Xid {{{{xid}}}}")], "none", w=8),
        panel("timeseries", "Uncorrectable ECC errors",
              [(f'sum by ({per}) (increase(slicemeter_gpu_ecc_errors_total{{{sel}, error_type="uncorrected", '
                f'counter="volatile"}}[$__rate_interval]))', legend)], "none", w=8),
        panel("timeseries", "Degraded GPUs", [(f"count({degraded_gpus(sel)}) or vector(0)", "degraded")], "none", w=8),
    ]


# The live bill (docs/live-bill.md): ingest's `--bill-interval` families, on the export's basis.
BILL = f'{T}, basis="allocation"'


def _var_datasource() -> dict:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {}, "hide": 0, "refresh": 1}


def _var(name: str, label: str, query: str) -> dict:
    return {
        "name": name, "label": label, "type": "query", "datasource": DS,
        "query": {"query": query, "refId": f"{name}-var"}, "definition": query,
        "includeAll": True, "multi": True, "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "refresh": 2, "sort": 1, "hide": 0,
    }


VAR_TENANT = _var("tenant", "Tenant", "label_values(slicemeter_gpu_memory_total_bytes, tenant)")
VAR_NAMESPACE = _var("namespace", "Namespace",
                     f"label_values(slicemeter_slice_allocation_ratio{{{T}}}, namespace)")
VAR_NODE = _var("node", "Node", f"label_values(slicemeter_gpu_memory_total_bytes{{{T}}}, node)")
VAR_GPU = _var("gpu", "GPU", f'label_values(slicemeter_gpu_memory_total_bytes{{{TN}}}, gpu_uuid)')
VAR_MODEL = _var("model", "GPU model", f'label_values(slicemeter_gpu_memory_total_bytes{{{TN}}}, model)')


def panel(kind: str, title: str, targets: list[tuple[str, str]], unit: str, w: int = 12, h: int = 8,
          description: str = "", instant: bool = False) -> dict:
    """One panel; targets are (PromQL, legend). Units drive the tests' plausibility checks."""
    defaults: dict = {"unit": unit}
    if unit == "percentunit":
        defaults.update(min=0, max=1)
    p = {
        "type": kind, "title": title, "description": description, "datasource": DS,
        "gridPos": {"w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend,
             "instant": instant or kind in ("stat", "table", "bargauge", "gauge"),
             "range": not (instant or kind in ("stat", "table", "bargauge", "gauge"))}
            for i, (expr, legend) in enumerate(targets)
        ],
    }
    if kind == "table":
        p["transformations"] = [{"id": "merge", "options": {}}]
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "area"}
    return p


def row(title: str) -> dict:
    return {"type": "row", "title": title, "collapsed": False, "gridPos": {"w": 24, "h": 1}, "panels": []}


def layout(panels: list[dict]) -> list[dict]:
    """Left to right, top to bottom, 24 columns; ids in order."""
    x = y = row_h = 0
    for i, p in enumerate(panels, start=1):
        w, h = p["gridPos"]["w"], p["gridPos"]["h"]
        if x + w > 24:
            x, y, row_h = 0, y + row_h, 0
        p["gridPos"].update(x=x, y=y)
        p["id"] = i
        x, row_h = x + w, max(row_h, h)
    return panels


def dashboard(uid: str, title: str, description: str, variables: list[dict], panels: list[dict]) -> dict:
    return {
        "uid": uid, "title": title, "description": description, "tags": ["slicemeter", "gpu"],
        "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
        "time": {"from": "now-6h", "to": "now"}, "refresh": "1m", "timezone": "",
        "links": [{"type": "dashboards", "tags": ["slicemeter"], "asDropdown": True,
                   "title": "slicemeter", "includeVars": True, "keepTime": True}],
        "annotations": {"list": []},
        "templating": {"list": [_var_datasource(), *variables]},
        "panels": layout(panels),
    }


def fleet() -> dict:
    return dashboard(
        "slicemeter-fleet", "slicemeter / Fleet",
        "GPU fleet: how much of the GPUs is allocated to slices and how much is used.",
        [VAR_TENANT, VAR_NODE, VAR_MODEL],
        [
            row("Now"),
            panel("stat", "GPUs", [(f"count(slicemeter_gpu_memory_total_bytes{{{TN}}})", "GPUs")], "none", w=4),
            panel("stat", "Allocated", [(f"avg(slicemeter_gpu_allocated_ratio{{{TN}}})", "allocated")],
                  "percentunit", w=4, description="Mean over GPUs of the slices' allocation shares."),
            panel("stat", "Used", [(f"avg(slicemeter_gpu_used_ratio{{{TN}}})", "used")], "percentunit", w=4),
            panel("stat", "Allocated but unused (GPUs)",
                  [(f"sum(gpu:slicemeter_gpu_allocated_unused:ratio{{{TN}}})", "GPU-equivalents")], "none", w=4,
                  description="Paid for, not used: allocated minus used, in whole GPUs."),
            panel("stat", "GPUs without slices",
                  [(f"count(slicemeter_gpu_slices{{{TN}}} == 0) or vector(0)", "GPUs")], "none", w=4),
            panel("stat", "Power", [(f"sum(slicemeter_gpu_power_watts{{{TN}}})", "W")], "watt", w=4),
            row("Over time"),
            panel("timeseries", "Allocated and used, fleet average",
                  [(f"avg(slicemeter_gpu_allocated_ratio{{{TN}}})", "allocated"),
                   (f"avg(slicemeter_gpu_used_ratio{{{TN}}})", "used")], "percentunit"),
            panel("timeseries", "Used by GPU model",
                  [(f"avg by (model) (slicemeter_gpu_used_ratio{{{TN}}})", "{{model}}")], "percentunit"),
            panel("timeseries", "Used by tenant",
                  [(f'tenant:slicemeter_gpu_used:ratio{{{T}}}', "{{tenant}}")], "percentunit"),
            panel("timeseries", "Energy draw",
                  [(f"sum by (node) (rate(slicemeter_gpu_energy_joules_total{{{TN}}}[$__rate_interval]))",
                    "{{node}}")], "watt", description="Rate of NVML's energy counter."),
            row("GPUs"),
            panel("table", "Idle capacity per GPU",
                  [(f"gpu:slicemeter_gpu_idle:ratio{{{TN}}}", "idle"),
                   (f"gpu:slicemeter_gpu_unallocated:ratio{{{TN}}}", "unallocated")], "percentunit", w=24,
                  description="Idle: nobody used it. Unallocated: nobody holds a slice of it."),
            row("Device health"),
            *health_panels(TNM, "node", "{{node}}"),
            row("Pipeline health"),
            panel("timeseries", "Spooled Ticks (Kafka unreachable)",
                  [(f"sum by (node) (slicemeter_spool_ticks{{{N}}})", "{{node}}")], "none", w=8),
            # The error counter has no series until a file is rejected: show 0 per node until then.
            panel("timeseries", "HAMi region errors",
                  [(f"sum by (node) (increase(slicemeter_hami_region_errors_total{{{N}}}[$__range]))"
                    f" or sum by (node) (0 * slicemeter_gpu_slices{{{TN}}})", "{{node}}")], "none", w=8),
            panel("timeseries", "Ingest lag (messages)",
                  [("sum(slicemeter_ingest_lag_messages)", "lag")], "none", w=8),
            panel("stat", "Freeable GPUs (right-sizing plan)",
                  [("max(slicemeter_recommend_freeable_gpus)", "GPUs")], "none", w=12),
            panel("stat", "Monthly saving (right-sizing plan)",
                  [("max by (currency) (slicemeter_recommend_monthly_saving)", "{{currency}}")], "none", w=12),
        ],
    )


def tenants() -> dict:
    return dashboard(
        "slicemeter-tenants", "slicemeter / Tenants",
        "Per Kamaji tenant and namespace: GPU shares allocated and used, and what is paid for but idle.",
        [VAR_TENANT, VAR_NAMESPACE],
        [
            row("Live bill (allocation basis, this UTC month)"),
            panel("table", "Month-to-date, forecast and budget",
                  [(f"max by (tenant, currency) (slicemeter_tenant_month_to_date_charge{{{BILL}}})", "month to date"),
                   (f"max by (tenant, currency) (slicemeter_tenant_month_forecast_charge{{{BILL}}})", "forecast"),
                   (f"max by (tenant, currency) (slicemeter_tenant_month_budget{{{T}}})", "budget")], "none", w=12,
                  description="The invoice so far, the month's mean rate so far over the rest of the month, and the "
                              "tenant catalog's monthly budget (docs/live-bill.md)."),
            panel("bargauge", "Forecast as a share of the budget",
                  [(f"max by (tenant) (slicemeter_tenant_month_forecast_charge{{{BILL}}}) / on (tenant) "
                    f"max by (tenant) (slicemeter_tenant_month_budget{{{T}}} > 0)", "{{tenant}}")], "percentunit",
                  w=12, description="Over 100 %: the tenant heads over its budget by the month's end "
                                    "(SlicemeterTenantForecastOverBudget)."),
            panel("timeseries", "Month-to-date and forecast",
                  [(f"max by (tenant) (slicemeter_tenant_month_to_date_charge{{{BILL}}})", "{{tenant}} month to date"),
                   (f"max by (tenant) (slicemeter_tenant_month_forecast_charge{{{BILL}}})", "{{tenant}} forecast"),
                   (f"max by (tenant) (slicemeter_tenant_month_budget{{{T}}})", "{{tenant}} budget")], "none", w=24),
            row("GPU shares"),
            panel("bargauge", "Allocated fraction of the tenant's GPUs",
                  [(f"tenant:slicemeter_gpu_allocated:ratio{{{T}}}", "{{tenant}}")], "percentunit", w=8),
            panel("bargauge", "Used fraction of the tenant's GPUs",
                  [(f"tenant:slicemeter_gpu_used:ratio{{{T}}}", "{{tenant}}")], "percentunit", w=8),
            panel("bargauge", "GPUs per tenant", [(f"tenant:slicemeter_gpus:count{{{T}}}", "{{tenant}}")],
                  "none", w=8),
            panel("timeseries", "GPU-equivalents allocated and used",
                  [(f"tenant:slicemeter_gpu_allocated:sum{{{T}}}", "{{tenant}} allocated"),
                   (f"tenant:slicemeter_gpu_used:sum{{{T}}}", "{{tenant}} used")], "none", w=24),
            panel("timeseries", "GPU-equivalents allocated per namespace",
                  [(f"namespace:slicemeter_slice_allocated:sum{{{TNS}}}", "{{tenant}}/{{namespace}}")], "none"),
            panel("timeseries", "GPU-equivalents used per namespace",
                  [(f"namespace:slicemeter_slice_used:sum{{{TNS}}}", "{{tenant}}/{{namespace}}")], "none"),
            panel("timeseries", "Allocated but unused per namespace (GPU-equivalents)",
                  [(f"sum by (tenant, namespace) (slice:slicemeter_slice_allocated_unused:ratio{{{TNS}}})",
                    "{{tenant}}/{{namespace}}")], "none"),
            panel("timeseries", "GPU memory used per namespace (HAMi)",
                  [(f"sum by (tenant, namespace) (slicemeter_slice_memory_used_bytes{{{TNS}}})",
                    "{{tenant}}/{{namespace}}")], "bytes"),
            panel("table", "Most idle slices",
                  [(f"topk(20, slice:slicemeter_slice_allocated_unused:ratio{{{TNS}}})", "allocated - used")],
                  "percentunit", w=24, description="Allocated share minus used share, per container slice."),
        ],
    )


def node() -> dict:
    return dashboard(
        "slicemeter-node", "slicemeter / Node and GPU",
        "One node's GPUs and the container slices on them: NVML's view next to HAMi's.",
        [VAR_TENANT, VAR_NODE, VAR_MODEL, VAR_GPU, VAR_NAMESPACE],
        [
            row("GPUs (NVML)"),
            panel("timeseries", "SM utilization", [(f"slicemeter_gpu_sm_utilization_ratio{{{NG}}}",
                                                    "{{node}} GPU {{gpu_index}}")], "percentunit", w=8),
            panel("timeseries", "Memory controller utilization",
                  [(f"slicemeter_gpu_memory_utilization_ratio{{{NG}}}", "{{node}} GPU {{gpu_index}}")],
                  "percentunit", w=8),
            panel("timeseries", "Memory used", [(f"slicemeter_gpu_memory_used_bytes{{{NG}}}", "{{node}} GPU {{gpu_index}} used"),
                                                (f"slicemeter_gpu_memory_total_bytes{{{NG}}}", "{{node}} GPU {{gpu_index}} total")],
                  "bytes", w=8),
            panel("timeseries", "Power", [(f"slicemeter_gpu_power_watts{{{NG}}}", "{{node}} GPU {{gpu_index}}")], "watt", w=8),
            panel("timeseries", "Allocated and used share",
                  [(f"slicemeter_gpu_allocated_ratio{{{NG}}}", "{{node}} GPU {{gpu_index}} allocated"),
                   (f"slicemeter_gpu_used_ratio{{{NG}}}", "{{node}} GPU {{gpu_index}} used")], "percentunit", w=8),
            panel("timeseries", "Slices", [(f"slicemeter_gpu_slices{{{NG}}}", "{{node}} GPU {{gpu_index}}")], "none", w=8),
            row("Device health"),
            *health_panels(NGM, "node, gpu_index", "{{node}} GPU {{gpu_index}}"),
            row("Slices (HAMi)"),
            panel("table", "Slices on the GPU",
                  [(f"slicemeter_slice_allocation_ratio{{{NGS}}}", "allocated"),
                   (f"slicemeter_slice_usage_ratio{{{NGS}}}", "used"),
                   (f"slicemeter_slice_sm_limit_ratio{{{NGS}}}", "SM limit"),
                   (f"slicemeter_slice_sm_utilization_ratio{{{NGS}}}", "SM used")], "percentunit", w=24),
            panel("timeseries", "Slice memory: HAMi used vs limit",
                  [(f"slicemeter_slice_memory_used_bytes{{{NGS}}}", "{{namespace}}/{{pod}}/{{container}} used"),
                   (f"slicemeter_slice_memory_limit_bytes{{{NGS}}}", "{{namespace}}/{{pod}}/{{container}} limit")],
                  "bytes"),
            panel("timeseries", "Slice memory: NVML vs HAMi",
                  [(f"slicemeter_slice_memory_used_nvml_bytes{{{NGS}}}", "{{namespace}}/{{pod}}/{{container}} NVML"),
                   (f"slicemeter_slice_memory_used_bytes{{{NGS}}}", "{{namespace}}/{{pod}}/{{container}} HAMi")],
                  "bytes", description="Differences beyond tolerance raise SlicemeterMemoryDisagreement."),
            panel("timeseries", "Seconds since last kernel",
                  [(f"slicemeter_slice_last_kernel_age_seconds{{{NGS}}}", "{{namespace}}/{{pod}}/{{container}}")],
                  "s", w=8),
            panel("timeseries", "CUDA processes", [(f"slicemeter_slice_processes{{{NGS}}}",
                                                    "{{namespace}}/{{pod}}/{{container}}")], "none", w=8),
            panel("stat", "HAMi regions read / rejected",
                  [(f"sum(slicemeter_hami_region_ok{{{TNNS}}} == 1) or vector(0)", "read"),
                   (f"count(slicemeter_hami_region_ok{{{TNNS}}} == 0) or vector(0)", "rejected")], "none", w=8),
            row("Exporter"),
            panel("timeseries", "Tick build time", [(f"slicemeter_scrape_duration_seconds{{{N}}}", "{{node}}")], "s", w=8),
            panel("timeseries", "Source errors",
                  [(f"sum by (node, source) (rate(slicemeter_source_errors_total{{{N}}}[$__rate_interval]))",
                    "{{node}} {{source}}")], "none", w=8),
            panel("timeseries", "Ticks published",
                  [(f"sum by (node) (rate(slicemeter_published_ticks_total{{{N}}}[$__rate_interval]))",
                    "{{node}}")], "none", w=8),
            panel("timeseries", "Spool size", [(f"slicemeter_spool_bytes{{{N}}}", "{{node}}")], "bytes", w=12),
            panel("table", "Exporter build", [(f"slicemeter_build_info{{{N}}}", "{{version}}")], "none", w=12),
        ],
    )


DASHBOARDS = {"fleet.json": fleet, "tenants.json": tenants, "node.json": node}


# families served by `slicemeter ingest` (docs/metrics.md), not by the exporter's catalogue
INGEST_PREFIXES = ("slicemeter_ingest_", "slicemeter_recommend_", "slicemeter_dividend_", "slicemeter_tenant_month_")
# labels Prometheus attaches to every series of a target (prometheus/prometheus.yml, the ServiceMonitor)
TARGET_LABELS = {"node", "instance", "job"}
_SELECTOR = re.compile(r"\b((?:slicemeter|hami)_[a-z0-9_]+)\b(?!:)\s*(\{[^}]*\})?")
_MATCHER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")


def check_against_catalogue(targets: list[dict]) -> None:
    """Every exporter family a panel reads is in exporter/serve/catalogue.py, and every label it
    filters on is one of the family's (or a target label)."""
    families = by_sample_name()
    for t in targets:
        expr = t["expr"]
        for m in _SELECTOR.finditer(expr):
            name, selector = m.group(1), m.group(2) or ""
            if ":" in expr[max(0, m.start() - 1):m.start()] or name.startswith(INGEST_PREFIXES):
                continue   # a recording rule's name, or an ingest family
            family = families.get(name)
            if family is None:
                raise ValueError(f"{expr!r}: {name} is not a family of exporter/serve/catalogue.py")
            unknown = {x for x in _MATCHER.findall(selector)} - set(family.labels) - TARGET_LABELS
            if unknown:
                raise ValueError(f"{expr!r}: {name} has no label {', '.join(sorted(unknown))}")


def render() -> dict[str, str]:
    boards = {name: build() for name, build in DASHBOARDS.items()}
    for d in boards.values():
        check_against_catalogue([t for p in d["panels"] for t in p.get("targets", [])]
                                + [{"expr": v["query"]["query"]} for v in d["templating"]["list"] if v["type"] == "query"])
    return {name: json.dumps(d, indent=2) + "\n" for name, d in boards.items()}


def main() -> int:
    OUT.mkdir(exist_ok=True)
    for name, text in render().items():
        (OUT / name).write_text(text)
        print(f"wrote {OUT / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
