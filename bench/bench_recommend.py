"""Benchmark: the right-sizing and consolidation plan for a month of a large fleet.

Synthesizes a month of hourly rollups (sql/queries/recommend_synth_fleet.sql, DuckDB
generate_series: by default 1,000 nodes x 8 GPUs, ~15.5k slices, 720 hours = ~11 M
slice_hour rows) in a real DuckDB file, then times `build_plan` (target <= 10 s) and prints
the planner's GPU count beside first-fit decreasing measured in the same run.

    python bench/bench_recommend.py [--nodes 1000] [--hours 720] [--db FILE]

Building the data takes longer than planning (about a minute or more on 2 shared cores);
it is timed and printed separately. --db FILE keeps the file and reuses it when present.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ingest.recommend import build_plan  # noqa: E402
from ingest.store import connect, sql_text  # noqa: E402

PRICES = {"NVIDIA A100-SXM4-80GB": Decimal("2.40"), "NVIDIA H100 80GB HBM3": Decimal("4.10"),
          "NVIDIA L4": Decimal("0.80"), "Tesla T4": Decimal("0.35")}
TARGET_S = 10.0


def synthesize(con, nodes: int, gpn: int, clusters: int, hours: int, start: str) -> None:
    params = {"nodes": nodes, "gpn": gpn, "clusters": clusters, "hours": hours, "start": start}
    for stmt in sql_text("queries/recommend_synth_fleet.sql").split(";"):
        code = "\n".join(line for line in stmt.splitlines() if not line.strip().startswith("--"))
        if not code.strip():
            continue
        con.execute(stmt, {k: v for k, v in params.items() if f"${k}" in stmt})
    con.execute("CHECKPOINT")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--clusters", type=int, default=4,
                    help="tenant clusters (examples/large.yaml has 4)")
    ap.add_argument("--hours", type=int, default=720)
    ap.add_argument("--db", default=None, help="keep/reuse the synthesized database here")
    args = ap.parse_args()

    tmp = None
    if args.db:
        path = Path(args.db)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="bench_recommend_")
        path = Path(tmp.name) / "fleet.duckdb"
    reuse = path.is_file()
    con = connect(path)
    t0 = time.perf_counter()
    if not reuse:
        synthesize(con, args.nodes, args.gpus_per_node, args.clusters, args.hours, "2026-11-01")
    build_s = time.perf_counter() - t0
    rows = con.execute("SELECT count(*) FROM slice_hour").fetchone()[0]
    gpus = con.execute("SELECT count(DISTINCT gpu_uuid) FROM gpu_hour").fetchone()[0]
    con.close()
    print(f"data: {rows:,} slice_hour rows, {gpus:,} GPUs; "
          f"{'reused ' + str(path) if reuse else f'built in {build_s:.1f} s'}")

    con = connect(path, read_only=True)
    t0, c0 = time.perf_counter(), time.process_time()
    plan = build_plan(con, "2026-11", headroom=0.2, prices=PRICES)
    total_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0
    con.close()
    s = plan.summary
    ffd_gpus = s["gpus_ffd"]   # first-fit decreasing on the same groups and needs, same run
    print(f"plan: {total_s:.2f} s total ({total_s - s['plan_seconds']:.2f} s SQL over the month, "
          f"{s['plan_seconds']:.2f} s right-sizing + packing + placement); target <= {TARGET_S:.0f} s: "
          f"{'met' if total_s <= TARGET_S else 'MISSED'}")
    # On a shared machine wall time is mostly waiting for a core; CPU time (all threads
    # of this process) is what the plan costs. On an idle machine wall <= CPU time.
    print(f"plan CPU time: {cpu_s:.2f} s (DuckDB uses every core; packing is one thread)")
    print(f"slices: {s['slices']:,} ({s['slices_ended']:,} ended before the month's end); GPUs: {s['gpus_total']:,} metered, "
          f"{s['gpus_with_slices_today']:,} holding slices today")
    print(f"GPUs needed: first-fit decreasing {ffd_gpus:,}, "
          f"planner {s['gpus_planned']:,}, lower bound {s['lower_bound_gpus']:,}")
    print(f"ratio planner/FFD GPUs: {s['gpus_planned'] / ffd_gpus:.4f} "
          f"({ffd_gpus - s['gpus_planned']} GPUs fewer); gap to lower bound: "
          f"{s['optimality_gap']} GPUs ({s['optimality_gap'] / max(s['lower_bound_gpus'], 1):.2%})")
    print(f"freeable: {s['gpus_freeable']:,} GPUs, {s['nodes_freeable']} whole nodes; "
          f"saving {s['monthly_saving']} {s['currency']}/month; utilization "
          f"{s['utilization_today']:.1%} -> {s['projected_utilization']:.1%}")
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
