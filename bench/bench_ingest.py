"""Ingest benchmark: produce -> Tansu broker -> consume -> DuckDB, as samples/s.

Prints the ingest rate of one `slicemeter ingest` process (a child process, so its peak
RSS is its own), DuckDB's own Arrow insert rate for the very rows that process stored
(same run, same machine), their ratio, and the ingest's peak RSS. As context (not the
reference of the ratio) it also prints DuckDB inserting the same rows under the ingest's own
constraints: one transaction per batch and the ingest's DuckDB settings (100 MB memory).

    python bench/bench_ingest.py                      # 10 M samples
    python bench/bench_ingest.py --samples 2000000
    python bench/bench_ingest.py --backlog            # 50 M-sample backlog: RSS bound check

Goal: >= 1,000,000 samples/s, ratio >= 0.5, RSS < 500 MB on the 50 M backlog.
The machine is shared: figures are noisy, compare the ratio more than the rate.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from slicemeter.testkit.ingest_helpers import SLICEMETER, TOPIC, create_topic, produce_chunks
from slicemeter.broker import TansuBroker
from slicemeter.testkit.ingest_reference import print_references
from slicemeter.testkit.synth_ticks import fleet, messages, recent_start_ms


def run_ingest(bootstrap: str, db: Path, extra: list[str]) -> tuple[int, float, int, float, int]:
    """(samples, active seconds, peak RSS bytes, CPU seconds, batches read again one message
    at a time) of one ingest child process."""
    cmd = [*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", str(db),
           "--group", "", "--until-idle", "10", *extra]
    log = db.with_suffix(".log")
    with open(log, "w") as stderr:  # a file, not a pipe: a full pipe would stall the child
        proc = subprocess.Popen(cmd, cwd=REPO, stderr=stderr)
        _, status, usage = os.wait4(proc.pid, 0)
    err = log.read_text()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"ingest failed:\n{err}")
    m = re.search(r"samples=(\d+) active_seconds=([\d.]+)", err)
    reread = err.count("read again one by one")  # rejected batches, e.g. out of DuckDB memory
    return int(m.group(1)), float(m.group(2)), usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime, reread


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # 10 M: long enough that filling the pipeline (the first batch, ~0.5 s) does not decide the rate
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--backlog", action="store_true", help="50 M samples: the RSS bound check (slow)")
    ap.add_argument("--ticks-per-message", type=int, default=250, help="Ticks of a node per message (20 samples each)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-samples", type=int, default=250_000)
    ap.add_argument("--max-poll-records", type=int, default=None, help="passed to slicemeter ingest")
    ap.add_argument("--duckdb-memory", default=None, help="passed to slicemeter ingest")
    args = ap.parse_args()
    samples = 50_000_000 if args.backlog else args.samples
    nodes = fleet(40, ["https://acme.tenants.example:6443", "https://beta.tenants.example:6443"])
    per_tick = nodes[0].samples_per_tick
    ticks = max(1, samples // (per_tick * len(nodes)))
    with tempfile.TemporaryDirectory() as tmp, TansuBroker(log_path=Path(tmp) / "tansu.log") as broker:
        create_topic(broker.bootstrap, TOPIC, args.partitions)
        t = time.perf_counter()
        n_msg, produced = produce_chunks(broker.bootstrap, messages(nodes, recent_start_ms(ticks), ticks, args.ticks_per_message))
        produce_s = time.perf_counter() - t
        print(f"produced {produced:,} samples in {n_msg:,} messages: {produced / produce_s:,.0f} samples/s")
        db = Path(tmp) / "ingest.duckdb"
        stored, active_s, rss, cpu_s, reread = run_ingest(broker.bootstrap, db, ["--batch-samples", str(args.batch_samples)]
                                       + (["--max-poll-records", str(args.max_poll_records)] if args.max_poll_records else [])
                                       + (["--duckdb-memory", args.duckdb_memory] if args.duckdb_memory else []))
        if stored != produced:
            raise SystemExit(f"stored {stored} samples, produced {produced}")
        rate = stored / active_s
        print(f"ingest: {stored:,} samples in {active_s:.2f} s = {rate:,.0f} samples/s "
              f"(goal >= 1,000,000)")
        print_references(db, Path(tmp), rate, args.batch_samples)
        print(f"ingest CPU: {cpu_s:.1f} s user+sys over the process's life (start-up included) = "
              f"{cpu_s / stored * 1e6:.2f} us per sample")
        if reread:
            print(f"WARNING: {reread} batch(es) rejected by DuckDB and read again one message at a time "
                  "(out of memory? see --duckdb-memory); the rate above includes that")
        print(f"ingest peak RSS: {rss / 2**20:,.0f} MB" + (" (goal < 500 MB)" if args.backlog else ""))
        print(f"machine load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
