"""Time-travel generation rate on examples/large.yaml (1,000 nodes x 8 GPUs).

Measures, in one run:
1. one simulated hour at 10 s: every GPU row and slice row of 360 Ticks per node, as Arrow
   tables in the Tick schema; samples/s = (GPU rows + slice rows) / wall time, including the
   per-call setup (workload arrays, weekly power tables), excluding scenario loading and
   one-time imports (a one-tick warm-up runs first);
2. the reference, measured here too: the same generator one Tick per chunk (no
   vectorisation over time) on the first 50 nodes for 30 ticks; the ratio says what the
   columnar path buys;
3. a month of hourly rollup input: 30 days at one sample per hour (interval 3600 s, each
   row standing for its hour), all nodes: wall time and samples/s.
Usage: python bench/bench_timetravel.py [--scenario examples/large.yaml]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


from slicemeter.simulator.scenario import load_scenario
from slicemeter.simulator.timetravel import generate

START_MS = 1_793_491_200_000       # 2026-11-01T00:00:00Z
GOAL = 1_000_000


def _run(scenario, start, end, interval_s, chunk_s, nodes=None) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = 0
    for _node, g, s in generate(scenario, start, end, interval_s=interval_s, chunk_s=chunk_s, nodes=nodes):
        n += g.num_rows + s.num_rows
    return n, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default=str(Path(__file__).resolve().parent.parent / "examples/large.yaml"))
    ap.add_argument("--month-days", type=int, default=30)
    args = ap.parse_args()
    t0 = time.perf_counter()
    sc = load_scenario(args.scenario)
    load_s = time.perf_counter() - t0
    gpus = sum(len(n.gpus) for n in sc.nodes)
    slices = sum(len(c.devices) for n in sc.nodes for p in n.pods for c in p.containers)
    print(f"scenario: {len(sc.nodes)} nodes, {gpus} GPUs, {slices} slices (loaded in {load_s:.2f} s)")
    _run(sc, START_MS, START_MS + 10_000, 10, 10, nodes=[sc.nodes[0].name])   # warm-up: one-time imports

    n, dt = _run(sc, START_MS, START_MS + 3_600_000, 10, 3600)
    rate = n / dt
    print(f"1 simulated hour at 10 s: {n:,} samples in {dt:.2f} s = {rate:,.0f} samples/s "
          f"(goal {GOAL:,}: ratio {rate / GOAL:.2f})")

    ref_nodes = [x.name for x in sc.nodes[:50]]
    rn, rdt = _run(sc, START_MS, START_MS + 30 * 10_000, 10, 10, nodes=ref_nodes)
    ref = rn / rdt
    print(f"reference, one Tick per chunk (50 nodes x 30 ticks): {rn:,} samples in {rdt:.2f} s = "
          f"{ref:,.0f} samples/s; columnar / per-tick = {rate / ref:.1f}x")

    days = args.month_days
    mn, mdt = _run(sc, START_MS, START_MS + days * 86_400_000, 3600, days * 86400)
    print(f"{days} days of hourly rollup input (interval 3600 s): {mn:,} samples in {mdt:.2f} s = "
          f"{mn / mdt:,.0f} samples/s")
    full = gpus + slices
    print(f"(for scale: a month at 10 s would be ~{full * 8640 * days / 1e9:.1f} G samples, "
          f"~{full * 8640 * days / rate / 60:.0f} min at the rate above)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
