"""Benchmark: monthly export (chargeback + invoice CSV + Parquet detail + FOCUS CSV/Parquet).

Two months of hourly rollups are generated straight into DuckDB (testkit/synth_month.py):
the demo fleet's size (10 GPUs, 2-3 slices each) and a large fleet (8,000 GPUs, ~20,000
slices, ~5.6 M GPU-hours and ~12.6 M slice-hours), the large one also through the readers'
file ingest keeps of it (store/reader_file.py; its money kept, as ingest keeps it), which
is what a live deployment exports from. The export runs as `slicemeter export` in a child
process, so its wall time, CPU time and peak RSS are the command's own. Targets: <= 2 s
for the demo fleet; <= 15 s from the large one's store file, <= 5 s from its readers'
file; <= 1.5 GiB peak RSS.
Reference measured in the same run: one plain DuckDB aggregate over the same slice_hour
rows (Σ share-seconds by tenant), i.e. the cost of just reading the month once.
The large database is cached under var/bench/ (generating it takes minutes).

    python bench/bench_export.py [--gpus 8000] [--fresh]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from slicemeter.chargeback.bill import parse_month
from slicemeter.chargeback.kept import keep_hours, kept_current
from slicemeter.store import connect
from slicemeter.store.reader_file import ReaderFile
from slicemeter.testkit.synth_month import synth_month_db

MONTH = "2026-11"
RSS_TARGET_GIB = 1.5


def reference(path: Path) -> tuple[float, int, int]:
    con = connect(path, read_only=True)
    try:
        t = time.perf_counter()
        con.execute("SELECT tenant, sum(alloc_dominant_share_s), sum(usage_share_s) FROM slice_hour_tenant "
                    "GROUP BY tenant").fetchall()
        ref = time.perf_counter() - t
        return (ref, con.execute("SELECT count(*) FROM gpu_hour").fetchone()[0],
                con.execute("SELECT count(*) FROM slice_hour").fetchone()[0])
    finally:
        con.close()


def export(path: Path, out: Path) -> tuple[float, float, float, str]:
    """`slicemeter export` in a child: wall s, CPU s, peak RSS GiB, its summary line. The
    figures are that child's own (wait4), not those of every child so far: generating the
    month may have run one bigger."""
    t = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen([sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())",
                                 "export", "--db", str(path), "--month", MONTH, "--out", str(out)],
                                stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        stderr = err.read()
    if proc.returncode != 0:
        raise SystemExit(f"slicemeter export failed ({proc.returncode}): {stderr[-2000:]}")
    summary = stderr.strip().splitlines()[-1]
    assert len(list(out.iterdir())) == 5, stderr[-2000:]
    return took, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024**2, summary   # ru_maxrss: KiB


def readers_file(month: Path, dest: Path) -> Path:
    """The readers' file ingest would keep of the month's store (a copy of it, money kept)."""
    live = dest.with_name("live.duckdb")
    shutil.copyfile(month, live)
    con = connect(live)
    try:
        start, end = parse_month(MONTH)
        if not kept_current(con, start, end):
            keep_hours(con, start, end)
        return ReaderFile(con, dest).refresh()
    finally:
        con.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8000)
    ap.add_argument("--fresh", action="store_true", help="regenerate the cached large database")
    ap.add_argument("--readers-file", nargs=2, metavar=("MONTH_DB", "DEST"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.readers_file:
        readers_file(*map(Path, args.readers_file))
        return 0
    cache = REPO / "var" / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        for label, gpus, target, path in (
            ("demo fleet", 10, 2.0, Path(tmp) / "demo.duckdb"),
            ("large fleet", args.gpus, 15.0, cache / f"month-{args.gpus}.duckdb"),
            ("large fleet, readers' file", args.gpus, 5.0, Path(tmp) / "reader.duckdb"),
        ):
            t = time.perf_counter()
            if path.name == "reader.duckdb":
                # in a child: a big bench process would be the export child's RSS until its exec
                subprocess.run([sys.executable, __file__, "--readers-file", str(cache / f"month-{args.gpus}.duckdb"),
                                str(path)], check=True)
            else:
                synth_month_db(path, MONTH, gpus, fresh=args.fresh)
            built = time.perf_counter() - t
            ref, gh, sh = reference(path)
            load = os.getloadavg()[0]
            took, cpu, rss_gib, summary = export(path, Path(tmp) / f"out-{gpus}")
            print(f"export {label}: {gpus} GPUs, {gh} GPU-hours, {sh} slice-hours -> {took:.2f} s "
                  f"(target <= {target:.0f} s, {'OK' if took <= target else 'OVER'}), "
                  f"CPU time {cpu:.2f} s over {os.cpu_count()} cores, load average {load:.1f} before, "
                  f"peak RSS {rss_gib:.2f} GiB = {rss_gib * 2**30 / 1e9:.2f} GB (target <= {RSS_TARGET_GIB} GiB); "
                  f"reference one-pass aggregate {ref:.3f} s, ratio {took / max(ref, 1e-9):.1f}x; "
                  f"{summary}" + (f"; made in {built:.1f} s" if built > 1 else ""), flush=True)
    print("note: wall time on a shared machine depends on its load; CPU time is the steadier figure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
