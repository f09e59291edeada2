"""Drains after crashes, run after run: four ingest workers of one group SIGKILLed, then
`ingest --until-idle` of the group; each run must exit 0 with every partition stored (in
the drain's store, or committed by a dead worker).

    .venv/bin/python bench/bench_drain_after_kills.py --runs 20 [--seed N] [--window 1,4.5]
    .venv/bin/python bench/bench_drain_after_kills.py --runs 20 --kill-at assigned

By default each member dies at a random moment of --window seconds after its start (1-4.5:
joining the group, syncing or holding partitions, as a crash loop's members do), drawn from
--seed (printed, so a failing run can be repeated), and the drain idles out after 15 s.
Each run's line says how many members the group had given partitions before they died.
`--kill-at assigned` kills each member once the group gave it partitions instead, with a
5 s idle drain.

A fresh Tansu broker per run. Prints each run's kill times, exit status and duration, then
the count of runs that drained everything; exits 1 unless every run did.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from slicemeter.broker import TansuBroker
from slicemeter.testkit.cb_rows import ACME
from slicemeter.testkit.ingest_helpers import (create_topic, drain_after_killed_members, messages_accounted,
                                               produce_chunks)
from slicemeter.testkit.synth_ticks import fleet, messages, recent_midnight_ms

MEMBERS = 4


def kill_times(rng: random.Random, members: int = MEMBERS, low: float = 1.0, high: float = 4.5) -> list[float]:
    return [round(rng.uniform(low, high), 2) for _ in range(members)]


def one_run(folder: Path, kill_after: list[float] | None, until_idle: float) -> tuple[int, bool, float, str, int]:
    """(the drain's exit status, every partition stored, seconds of kills and drain, the
    drain's log, how many members the group had given partitions before they died)."""
    with TansuBroker(log_path=folder / "tansu.log") as broker:
        create_topic(broker.bootstrap, partitions=4)
        sent, _ = produce_chunks(broker.bootstrap, list(messages(fleet(8, [ACME]), recent_midnight_ms(), 20, 10)))
        started = time.monotonic()
        rc, log = drain_after_killed_members(broker.bootstrap, folder, MEMBERS, kill_after, until_idle)
        took = time.monotonic() - started
        complete = messages_accounted(broker.bootstrap, folder / "drain.duckdb", "g", 4) == sent
    holding = sum("slicemeter.ingest: assigned partitions [" in (folder / f"member-{i}.log").read_text()
                  for i in range(MEMBERS))
    return rc, complete, took, log, holding


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--kill-at", choices=("random", "assigned"), default="random",
                        help="random: 1-4.5 s after each member's start (default); assigned: once it holds partitions")
    parser.add_argument("--seed", type=int, default=None, help="the kill times' seed (default: drawn, and printed)")
    parser.add_argument("--window", default="1,4.5", metavar="LOW,HIGH",
                        help="random kills this many seconds after each member's start (default %(default)s)")
    parser.add_argument("--until-idle", type=float, default=None,
                        help="the drain's --until-idle (default 15 with random kills, 5 with assigned)")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10 ** 6)
    until_idle = args.until_idle if args.until_idle is not None else 15 if args.kill_at == "random" else 5
    low, high = (float(x) for x in args.window.split(","))
    rng = random.Random(seed)
    window = f" {low:g}-{high:g} s after each start" if args.kill_at == "random" else ""
    print(f"kill at: {args.kill_at}{window}, seed {seed}, drain --until-idle {until_idle:g}", flush=True)
    good = 0
    for run in range(1, args.runs + 1):
        kill_after = kill_times(rng, MEMBERS, low, high) if args.kill_at == "random" else None
        with tempfile.TemporaryDirectory(prefix="slicemeter-drain-") as tmp:
            rc, complete, took, log, holding = one_run(Path(tmp), kill_after, until_idle)
        good += rc == 0 and complete
        killed = "at partitions" if kill_after is None else "at " + ", ".join(f"{t:.2f}" for t in kill_after) + " s"
        waited = "waited for dead members' partitions" if "drain idle, waiting up to" in log else "no wait"
        print(f"run {run}: members killed {killed} ({holding} holding partitions); exit {rc}, every partition "
              f"stored: {complete}, drain {waited}, {took:.1f} s", flush=True)
        if rc != 0 or not complete:
            print("  drain's log, last lines:\n    " + "\n    ".join(log.strip().splitlines()[-15:]), flush=True)
    print(f"{good} of {args.runs} drains exited 0 with every partition stored (seed {seed})")
    return 0 if good == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
