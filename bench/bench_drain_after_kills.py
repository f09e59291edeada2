"""Drains after crashes, run after run: four ingest workers of one group SIGKILLed while
they hold partitions, then `ingest --until-idle 5` of the group; each run must exit 0 with
every partition stored (in the drain's store, or committed by a dead worker).

    .venv/bin/python bench/bench_drain_after_kills.py --runs 20

A fresh Tansu broker per run. Prints each run's exit status and duration, then the count
of runs that drained everything.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from slicemeter.broker import TansuBroker
from slicemeter.testkit.cb_rows import ACME
from slicemeter.testkit.ingest_helpers import (create_topic, drain_after_killed_members, messages_accounted,
                                               produce_chunks)
from slicemeter.testkit.synth_ticks import fleet, messages, recent_midnight_ms


def one_run(folder: Path) -> tuple[int, bool, float]:
    with TansuBroker(log_path=folder / "tansu.log") as broker:
        create_topic(broker.bootstrap, partitions=4)
        sent, _ = produce_chunks(broker.bootstrap, list(messages(fleet(8, [ACME]), recent_midnight_ms(), 20, 10)))
        started = time.monotonic()
        rc, _ = drain_after_killed_members(broker.bootstrap, folder)
        took = time.monotonic() - started
        complete = messages_accounted(broker.bootstrap, folder / "drain.duckdb", "g", 4) == sent
    return rc, complete, took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    good = 0
    for run in range(1, args.runs + 1):
        with tempfile.TemporaryDirectory(prefix="slicemeter-drain-") as tmp:
            rc, complete, took = one_run(Path(tmp))
        good += rc == 0 and complete
        print(f"run {run}: exit {rc}, every partition stored: {complete}, {took:.1f} s", flush=True)
    print(f"{good} of {args.runs} drains exited 0 with every partition stored")
    return 0 if good == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
