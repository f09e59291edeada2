"""What it costs to keep the readers' file fresh, against the raw data the store holds.

    python bench/bench_reader_refresh.py                      # 1x, 10x, 100x the demo month
    python bench/bench_reader_refresh.py --scales 1 10 30     # where the disk is short

The demo month is 12 GPUs with 20 slices sampled every 10 s for 30 days (~8.3 M raw
samples), generated with DuckDB SQL (sql/testkit/reader_month.sql) and rolled up
into gpu_hour / slice_hour by the ingest's own rollup macros and fold. Scale k holds k
times those raw samples (older copies of the month, as a k-times longer raw retention
would) and the same rollups.

For each scale it prints:

- old: the reference, a copy of the whole live file (CHECKPOINT, copy the file, fsync, rename),
  all of it on the ingest thread: ingest stops for it;
- new: slicemeter.store.reader_file.ReaderFile: the time on the ingest thread (pinning a read
  transaction) and the copy of the reader-facing tables that runs beside ingest, up to the
  rename (median of --repeat runs);
- the file sizes and the ratios old / new.

Needs about 2 x (k x 0.3 GB) of free disk for scale k (the store and its whole copy).
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


from slicemeter import store
from slicemeter.store.reader_file import ReaderFile
from slicemeter.store.script import execute_script

START_MS = 1_793_491_200_000   # 2026-11-01 00:00 UTC
DEMO = {"gpus": 12, "slices": 20, "interval_ms": 10_000, "days": 30}


def whole_file_copy(con, db: Path, dest: Path) -> float:
    """The whole-file copy (the reference): seconds the ingest thread spends on it."""
    started = time.perf_counter()
    con.execute("CHECKPOINT")
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(db, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dest)
    return time.perf_counter() - started


def reader_refresh(reader: ReaderFile, repeat: int) -> tuple[float, float]:
    """(median seconds on the ingest thread, median seconds in the background)."""
    pins, copies = [], []
    for _ in range(repeat):
        reader.refresh()
        pins.append(reader.pin_s)
        copies.append(reader.copy_s)
    return statistics.median(pins), statistics.median(copies)


def raw_samples(con) -> int:
    return con.execute("SELECT (SELECT count(*) FROM raw_gpu_rows) + (SELECT count(*) FROM raw_slice_rows)").fetchone()[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scales", type=int, nargs="+", default=[1, 10, 100])
    p.add_argument("--repeat", type=int, default=3, help="runs of the new refresh per scale (median)")
    p.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary folder)")
    args = p.parse_args(argv)
    scales = sorted(set(args.scales))
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-reader-") as tmp:
        tmp = Path(tmp)
        db, old_dest, new_dest = tmp / "live.duckdb", tmp / "old-snapshot.duckdb", tmp / "reader.duckdb"
        con = store.connect(db)
        started = time.perf_counter()
        execute_script(con, "testkit/reader_month.sql", {**DEMO, "start_ms": START_MS})
        store.fold_pending_rollups(con)
        con.execute("CHECKPOINT")
        month = raw_samples(con)
        print(f"demo month: {month:,} raw samples, {db.stat().st_size / 1e6:,.0f} MB "
              f"({time.perf_counter() - started:.1f} s to generate)", flush=True)
        reader = ReaderFile(con, new_dest)
        print(f"{'scale':>5} {'raw samples':>13} {'file MB':>9} {'old s':>8} {'reader MB':>10} "
              f"{'new ingest s':>13} {'new copy s':>11} {'old/new ingest':>15} {'old/new total':>14}")
        copies = 1
        for k in scales:
            while copies < k:
                execute_script(con, "testkit/reader_older_raw.sql",
                               {"copy": copies, "days": DEMO["days"], "start_ms": START_MS})
                copies += 1
            con.execute("CHECKPOINT")  # a steady state: the old snapshot's CHECKPOINT finds little to do
            old_s = whole_file_copy(con, db, old_dest)
            old_dest.unlink()
            pin_s, copy_s = reader_refresh(reader, args.repeat)
            print(f"{k:>4}x {raw_samples(con):>13,} {db.stat().st_size / 1e6:>9,.0f} {old_s:>8.3f} "
                  f"{new_dest.stat().st_size / 1e6:>10,.1f} {pin_s:>13.4f} {copy_s:>11.3f} "
                  f"{old_s / pin_s:>15,.0f} {old_s / (pin_s + copy_s):>14.1f}", flush=True)
        con.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
