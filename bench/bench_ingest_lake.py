"""Ingest into a DuckLake with 1 and 2 workers of one consumer group, beside the
single-file DuckDB ingest of the same messages (same run, same machine): samples/s.

The lake's catalog is a PostgreSQL cluster started here (Debian's binaries, a temporary
folder), its data Parquet files in a temporary folder; the broker is Tansu.

    .venv-lake/bin/python bench/bench_ingest_lake.py      # 2 M samples (make lake-setup)
    .venv-lake/bin/python bench/bench_ingest_lake.py --samples 4000000

It needs the lake's environment: DuckDB 1.5.5 and its extension wheels (pyproject, `lake`).

A worker's rate counts from its first record to its last commit; two workers' rate is
every sample over the longer of their two spans. Each batch keeps the money of the
GPU-hours it touched (sql/lake/keep_money.sql): last, the month's bill is read from the
first lake's kept hours, beside the same bill from its rollups (the kept rows deleted in a
transaction rolled back after), each on a new connection, and the single file's bill. The machine is shared (2 cores): two
workers compete for the same cores, so the figure here says what the lake's commits
cost, not what two machines would reach.
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

from slicemeter.broker import TansuBroker
from slicemeter.testkit.ingest_helpers import SLICEMETER, TOPIC, create_topic, produce_chunks
from slicemeter.testkit.postgres import start_cluster
from slicemeter.testkit.synth_ticks import fleet, messages, recent_start_ms

REPO = Path(__file__).resolve().parent.parent


def start_ingest(bootstrap: str, db: str, log: Path, extra: list[str], idle_s: int = 10) -> subprocess.Popen:
    cmd = [*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", db, "--until-idle", str(idle_s), *extra]
    return subprocess.Popen(cmd, cwd=REPO, stderr=open(log, "w"))  # a file: a full pipe would stall it


def finished(proc: subprocess.Popen, log: Path) -> tuple[int, float]:
    """(samples stored, active seconds) of an ingest child, once it exits."""
    if proc.wait() != 0:
        raise SystemExit(f"ingest failed:\n{log.read_text()[-3000:]}")
    m = re.search(r"samples=(\d+) active_seconds=([\d.]+)", log.read_text())
    return int(m.group(1)), float(m.group(2))


def lake_run(bootstrap: str, pg, tmp: Path, name: str, workers: int, batch: list[str]) -> tuple[int, float, int]:
    """(samples, seconds, Parquet files) of `workers` lake workers in one group."""
    pg.create_database(name)
    target, data = pg.lake(name), tmp / f"{name}-data"
    extra = ["--lake-data", str(data), "--group", name, *batch]
    # a long idle timeout: a worker waiting out a rebalance must not take it for the end
    runs = [(start_ingest(bootstrap, target, tmp / f"{name}-{i}.log", extra, idle_s=30), tmp / f"{name}-{i}.log")
            for i in range(workers)]
    results = [finished(p, log) for p, log in runs]
    files = sum(1 for _ in data.rglob("*.parquet"))
    return sum(s for s, _ in results), max(t for _, t in results), files


def bill_reads(target: str, single: Path) -> None:
    """The month's bill from the lake's kept hours and from its rollups, and the single file's."""
    from slicemeter import store
    from slicemeter.chargeback.bill import compute_bill, parse_month
    from slicemeter.chargeback.kept import forget_kept, kept_current
    from slicemeter.store import lake

    with store.connect(single, read_only=True) as con:
        month = con.execute("SELECT strftime(max(hour), '%Y-%m') FROM gpu_hour").fetchone()[0]
        t = time.perf_counter()
        total = compute_bill(con, month).total
        single_s = time.perf_counter() - t
    with store.connect(target, read_only=True) as con:
        # a lake appends each batch's keeping (nothing compacts it): rows held per GPU-hour billed
        held, billed = con.execute(f"SELECT (SELECT count(*) FROM {lake.ALIAS}.main.kept_gpu_hour), "
                                   "(SELECT count(*) FROM kept_gpu_hour)").fetchone()
    timings, connects = {}, []
    for kept in (True, False, True):
        t = time.perf_counter()
        con = store.connect(target, read_only=kept)
        connects.append(time.perf_counter() - t)
        t = time.perf_counter()
        try:
            if not kept:
                con.execute("BEGIN TRANSACTION")
                forget_kept(con)
            assert kept_current(con, *parse_month(month)) == kept
            bill = compute_bill(con, month)
            if bill.total != total:
                raise SystemExit(f"the lake's bill ({'kept' if kept else 'rollups'}) is {bill.total}, the file's {total}")
            if not kept:
                con.execute("ROLLBACK")
            timings.setdefault(kept, []).append(time.perf_counter() - t)
        finally:
            con.close()
    print(f"bill of {month} ({total}) from the lake's kept hours: "
          + ", ".join(f"{x:.2f}" for x in timings[True]) + f" s; from its rollups: {timings[False][0]:.2f} s; "
          f"kept / rollups {min(timings[True]) / timings[False][0]:.2f}; attaching the lake "
          + ", ".join(f"{x:.2f}" for x in connects) + f" s; the single file's bill {single_s:.2f} s; "
          f"kept GPU-hour rows held {held:,} for {billed:,} GPU-hours ({held / billed:.1f} per GPU-hour)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=2_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch-samples", type=int, default=250_000)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="lake runs to make (default 1 2)")
    args = ap.parse_args()
    nodes = fleet(40, ["https://acme.tenants.example:6443", "https://beta.tenants.example:6443"])
    ticks = max(1, args.samples // (nodes[0].samples_per_tick * len(nodes)))
    batch = ["--batch-samples", str(args.batch_samples)]
    with tempfile.TemporaryDirectory() as tmp_name, TansuBroker(log_path=Path(tmp_name) / "tansu.log") as broker:
        tmp = Path(tmp_name)
        create_topic(broker.bootstrap, TOPIC, args.partitions)
        t = time.perf_counter()
        _, produced = produce_chunks(broker.bootstrap, messages(nodes, recent_start_ms(ticks), ticks, 250))
        print(f"produced {produced:,} samples in {time.perf_counter() - t:.1f} s")
        stored, seconds = finished(start_ingest(broker.bootstrap, str(tmp / "one.duckdb"), tmp / "one.log",
                                                ["--group", "", *batch]), tmp / "one.log")
        reference = stored / seconds
        print(f"reference: single-file DuckDB ingest, 1 process: {stored:,} samples in {seconds:.2f} s "
              f"= {reference:,.0f} samples/s")
        pg = start_cluster()
        try:
            rates: dict[int, float] = {}
            for workers in args.workers:
                stored, seconds, files = lake_run(broker.bootstrap, pg, tmp, f"lake{workers}", workers, batch)
                if stored != produced:
                    raise SystemExit(f"{workers} lake worker(s) stored {stored} samples, produced {produced}")
                rates[workers] = stored / seconds
                print(f"DuckLake (PostgreSQL catalog, local Parquet), {workers} worker(s): {stored:,} samples in "
                      f"{seconds:.2f} s = {rates[workers]:,.0f} samples/s; {rates[workers] / reference:.2f} x the "
                      f"reference; {files} Parquet files")
            if 1 in rates and len(rates) > 1:
                print("  against one lake worker: " + ", ".join(f"{w} workers {r / rates[1]:.2f} x"
                                                          for w, r in rates.items() if w != 1))
            bill_reads(pg.lake(f"lake{args.workers[0]}"), tmp / "one.duckdb")
        finally:
            pg.stop()
    print(f"machine load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (shared)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
