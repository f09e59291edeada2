"""What a refresh of the readers' file costs after one ingest interval, against the months held.

    python bench/bench_reader_changed_hours.py                   # 1,000 GPUs, 1 and 3 months held
    python bench/bench_reader_changed_hours.py --gpus 8000 --months 1 3

A store holds `months` generated months of hourly rollups (testkit/synth_month.py, the month
generator of bench_kept_money.py) with their money kept (chargeback/kept.py keep_hours, as
ingest's folds would have kept it). Then, for each run:

- reference: a whole copy (a first refresh into a new file: what every refresh cost before
  the change log), seconds beside ingest;
- interval: one ingest interval that touched every GPU of the last hour (its gpu_hour and
  slice_hour rows grow by a sample, its money is kept again, as a fold does and logs), then
  a refresh of the data file readers were not sent to: seconds on the ingest thread (stamp
  and pin) and beside it, up to the switch of the link (median of --repeat intervals, after
  the first interval of each data file, which a whole copy wrote: printed beside the row; it
  would cost more, once per data file, if the whole copy did not write its latest rows again);
  with --repeat 20 or more also the medians of the first and last tenth of the intervals and
  what the data files grew over them.

Needs about 3 x (the store) of free disk: the store, two data files and the reference.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from slicemeter import store
from slicemeter.chargeback.bill import parse_month
from slicemeter.chargeback.kept import keep_hours
from slicemeter.store.reader_file import ReaderFile, data_files
from slicemeter.testkit.synth_month import synthesize_month

MONTHS = ("2026-11", "2026-10", "2026-09")   # the latest first: one month held is November


def build(con, gpus: int, months: int) -> float:
    started = time.perf_counter()
    for k, month in enumerate(sorted(MONTHS[:months])):
        synthesize_month(con, month, gpus=gpus, seed=k)
        keep_hours(con, *parse_month(month))
    con.execute("CHECKPOINT")
    return time.perf_counter() - started


def one_interval(con, hour: datetime) -> None:
    """An interval's fold over every GPU of `hour`: the rollups grow by a sample, the money
    is kept again and the hour logged (sql/ingest/keep_money.sql)."""
    with store.transaction(con):
        con.execute("UPDATE gpu_hour SET sample_count = sample_count + 1, metered_s = least(3600, metered_s + 10) "
                    "WHERE hour = ?", [hour])
        con.execute("UPDATE slice_hour SET sample_count = sample_count + 1, metered_s = least(3600, metered_s + 10) "
                    "WHERE hour = ?", [hour])
    keep_hours(con, hour, hour + timedelta(hours=1))


def case(gpus: int, months: int, repeat: int, tmp: Path) -> str:
    """One store of `months` held: its table row (the whole copy and an interval's refresh)."""
    con = store.connect(tmp / "live.duckdb")
    try:
        build_s = build(con, gpus, months)
        gh, sh = con.execute("SELECT (SELECT count(*) FROM gpu_hour), (SELECT count(*) FROM slice_hour)").fetchone()
        last = con.execute("SELECT max(hour) FROM gpu_hour").fetchone()[0]
        reader = ReaderFile(con, tmp / "reader.duckdb")
        reader.refresh()
        one_interval(con, last)
        reader.refresh()           # both data files exist: every refresh from here copies changed hours
        # the two whole copies left gigabytes for the kernel to write back: a refresh a minute
        # after the previous one does not compete with that, so the intervals start after it
        os.sync()
        firsts, pins, copies = [], [], []
        slots = len(data_files(reader.dest))   # the data files a refresh alternates between
        for i in range(slots + repeat):
            one_interval(con, last - timedelta(hours=i % 2))
            reader.refresh()
            assert reader.incremental
            if i < slots:   # the first changed-hours refresh of each data file a whole copy wrote
                firsts.append(reader.pin_s + reader.copy_s)
                sizes = [os.path.getsize(f) for f in data_files(reader.dest)]
                continue
            pins.append(reader.pin_s)
            copies.append(reader.copy_s)
        (tmp / "whole").mkdir()
        whole = ReaderFile(con, tmp / "whole" / "reader.duckdb")
        whole.refresh()
        assert not whole.incremental
    finally:
        con.close()
    size = os.path.getsize(os.path.realpath(reader.dest)) / 1e6
    pin_s, copy_s = statistics.median(pins), statistics.median(copies)
    drift = ""
    if repeat >= 20:   # a long run: does a refresh, or a data file, grow with the intervals?
        totals = [p + c for p, c in zip(pins, copies)]
        k = repeat // 10
        grown = sum(os.path.getsize(f) for f in data_files(reader.dest)) - sum(sizes)
        drift = (f"; over {repeat} intervals, the median refresh of the first and last tenth "
                 f"{statistics.median(totals[:k]):.3f}, {statistics.median(totals[-k:]):.3f} s, "
                 f"the data files grew {grown / 1e6:+.1f} MB")
    load = os.getloadavg()[0]
    return (f"{gpus:>6} {months:>6} {gh:>10,} {sh:>12,} {size:>10,.1f} {whole.copy_s:>13.2f} "
            f"{pin_s:>15.4f} {copy_s:>16.3f} {whole.copy_s / (pin_s + copy_s):>15.1f} {load:>5.1f}"
            f"   (store built in {build_s:.0f} s; the first interval of each data file after its whole copy: "
            f"{', '.join(f'{t:.2f}' for t in firsts)} s{drift})")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus", type=int, default=1000)
    p.add_argument("--months", type=int, nargs="+", default=[1, 3], choices=[1, 2, 3])
    p.add_argument("--repeat", type=int, default=3, help="intervals refreshed per case (median)")
    p.add_argument("--dir", type=Path, default=None, help="where the files go (default: a temporary folder)")
    args = p.parse_args(argv)
    print(f"{'GPUs':>6} {'months':>6} {'GPU-hours':>10} {'slice-hours':>12} {'reader MB':>10} "
          f"{'whole copy s':>13} {'interval pin s':>15} {'interval copy s':>16} {'whole/interval':>15} {'load':>5}")
    for months in args.months:
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-reader-hours-") as tmp:
            print(case(args.gpus, months, args.repeat, Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
