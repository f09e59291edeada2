"""`slicemeter recommend`: right-sizing and consolidation plan for a month.

Prints the headline figures, the per-cluster plan and the slices with the largest
over-grant; with --out writes slices.csv, placement.csv, groups.csv and summary.csv.
"""
from __future__ import annotations

import argparse
import csv
from pathlib import Path

from slicemeter.csv_cells import neutralise_csv_cell
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices_or_default
from slicemeter.common import ConfigError, existing_db, month_window, named

SLICE_COLUMNS = ["tenant", "namespace", "pod", "container", "node", "model", "grant_memory_mib",
                 "recommended_gpumem_mib", "grant_cores_pct", "recommended_gpucores_pct",
                 "over_requested", "oom_risk", "idle", "planned_node"]
GROUP_COLUMNS = ["tenant", "model", "gpus_today", "gpus_with_slices_today", "gpus_ffd",
                 "gpus_planned", "lower_bound", "proven_optimal"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="DuckDB file (or the ingest snapshot), or a DuckLake ducklake:postgres:CONNINFO")
    parser.add_argument("--month", required=True, help="YYYY-MM (UTC)")
    parser.add_argument("--headroom", type=float, default=0.2,
                        help="margin over observed p99/p95 needs, e.g. 0.2 = 20 %%")
    parser.add_argument("--prices", default=None,
                        help=f"price catalog YAML (default {DEFAULT_PRICES.name} when present)")
    parser.add_argument("--out", default=None, help="directory for the CSV files")
    parser.add_argument("--keep", choices=["nodes", "gpus"], default="nodes",
                        help="nodes: free whole nodes (default); gpus: fewest slice moves")
    parser.add_argument("--top", type=int, default=20, help="slices to print")


def _safe_cell(value):
    """Names in a plan are the tenants' own (namespace, pod, container, a node's GPU model):
    written as a spreadsheet shows text, never as a formula."""
    return neutralise_csv_cell(value) if isinstance(value, str) else value


def _write_csv(path: Path, df) -> None:
    text = df.select_dtypes(include=["object", "string"]).columns
    df.assign(**{c: df[c].map(_safe_cell) for c in text}).to_csv(path, index=False, quoting=csv.QUOTE_MINIMAL)


def format_summary(s: dict) -> str:
    saving = (f"{s['monthly_saving']} {s['currency']}/month" if s.get("currency")
              else "n/a (no price catalog)")
    lines = [
        f"GPUs: {s['gpus_total']} metered, {s['gpus_with_slices_today']} holding slices today",
        f"plan: {s['gpus_planned']} GPUs (first-fit decreasing: {s['gpus_ffd']}, "
        f"lower bound: {s['lower_bound_gpus']}, gap: {s['optimality_gap']}"
        f"{', proven optimal' if s['proven_optimal'] else ''})",
        f"freeable: {s['gpus_freeable']} GPUs, {s['nodes_freeable']} whole nodes; saving {saving}",
        f"moves: {s['slices_moved']} slices change GPU",
        f"utilization: {s['utilization_today']:.1%} today -> {s['projected_utilization']:.1%} planned",
        f"slices: {s['slices']} ({s['over_requested']} over-requested, {s['oom_risk']} OOM risk, "
        f"{s['idle']} idle; {s['slices_ended']} ended before the month's end, not placed)",
    ]
    if s.get("gpus_short"):
        lines.append(f"warning: {s['gpus_short']} more GPUs needed where p95 needs exceed today's GPUs")
    if s.get("unpriced_models"):
        lines.append(f"warning: no price for {', '.join(s['unpriced_models'])}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from slicemeter.rightsizing.plan import build_plan
    from slicemeter.store import connect

    with named("--month"):
        month_window(args.month)
    if not (args.headroom >= 0 and args.headroom < 10):
        raise ConfigError(f"--headroom: must be in [0, 10), got {args.headroom}")
    db = existing_db(args.db)
    # the chargeback catalog; recommend prices a freed GPU by model (gpu_hour) only
    catalog = load_prices_or_default(args.prices)

    con = connect(db, read_only=True)
    try:
        plan = build_plan(con, args.month, args.headroom, catalog, keep=args.keep)
    finally:
        con.close()

    print(f"slicemeter recommend {args.month} (headroom {args.headroom:.0%})")
    print(format_summary(plan.summary))
    if len(plan.groups):
        print("\nper tenant cluster and GPU model:")
        print(plan.groups[GROUP_COLUMNS].to_string(index=False))
    if len(plan.slices):
        top = plan.slices.sort_values(["memory_saving_mib", "pod_uid"], ascending=[False, True])
        print(f"\nslices with the largest memory over-grant (top {args.top}):")
        print(top[SLICE_COLUMNS].head(args.top).to_string(index=False))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        _write_csv(out / "slices.csv", plan.slices)
        _write_csv(out / "placement.csv", plan.placement)
        _write_csv(out / "groups.csv", plan.groups)
        with open(out / "summary.csv", "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["key", "value"])
            for k, v in plan.summary.items():
                w.writerow([k, _safe_cell(";".join(v) if isinstance(v, list) else v)])
        print(f"\nwrote {out}/slices.csv, placement.csv, groups.csv, summary.csv")
    return 0
