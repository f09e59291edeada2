"""The demo's start-up, by phase: `slicemeter demo` on the 1st of a month (30 days of history)
from its start to "dashboard ready", each phase timed from the demo's own output lines as
they arrive:

- broker: Tansu started;
- history: the backfill published and ingested into the store (the progress bar's 100 %);
- exports: the last complete month and the month to date exported;
- dashboard: the exporters started and the dashboard answering.

Runs the demo's default history interval and, as the reference, a history of 10 s Ticks (the
exporters' own interval), alternately, `--rounds` times each; the load average is printed
with each run, since every phase shares the machine's cores.

    python bench/bench_demo_startup.py [--rounds 2] [--intervals 60,10]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from slicemeter.broker import free_port

REPO = Path(__file__).resolve().parent.parent
NOW = "2026-12-01T09:00:00Z"
# the line that ends each phase, in order
PHASES = [("broker", "broker    Tansu"), ("history", "history in the store"),
          ("exports", "(month to date)"), ("dashboard", "dashboard ready")]


def one_start(history_interval: int) -> dict[str, float]:
    """Seconds of each phase of one demo start-up; the demo is stopped after it."""
    with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
        cmd = [sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())", "demo",
               "--workdir", f"{tmp}/var", "--out", f"{tmp}/out", "--port", str(free_port()),
               "--exporter-port", str(free_port()), "--history-interval", str(history_interval)]
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "SLICEMETER_NOW": NOW}, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        ends, lines = {}, []
        try:
            for line in proc.stdout:
                lines.append(line)
                for name, marker in PHASES:
                    if name not in ends and marker in line:
                        ends[name] = time.monotonic() - t0
                if "dashboard ready" in line:
                    break
        finally:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=60)
        if len(ends) != len(PHASES):
            raise SystemExit(f"the demo did not get ready (history interval {history_interval} s):\n" + "".join(lines))
    out, before = {}, 0.0
    for name, _ in PHASES:
        out[name], before = ends[name] - before, ends[name]
    out["ready"] = ends["dashboard"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--intervals", default="60,10", help="history intervals to run alternately (the first is "
                                                         "the one measured, the others references)")
    args = ap.parse_args()
    intervals = [int(x) for x in args.intervals.split(",")]
    runs: dict[int, list[dict[str, float]]] = {i: [] for i in intervals}
    for r in range(args.rounds):
        for interval in intervals:
            load = os.getloadavg()[0]
            phases = one_start(interval)
            runs[interval].append(phases)
            print(f"round {r + 1}, history every {interval:>3} s, load {load:.1f}: "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()), flush=True)
    for interval, got in runs.items():
        print(f"history every {interval:>3} s, median of {len(got)}: "
              + ", ".join(f"{k} {statistics.median(p[k] for p in got):.1f} s" for k in got[0]))
    first, *refs = intervals
    ready = statistics.median(p["ready"] for p in runs[first])
    for ref in refs:
        print(f"ready at {first} s / at {ref} s: {ready / statistics.median(p['ready'] for p in runs[ref]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
