"""Benchmark: the month's bill and export read from the money kept per hour, against the same
export recomputed from the rollups, and what keeping costs.

A generated month (testkit/synth_month.py, cached under var/bench/) is kept whole once
(chargeback/kept.py keep_hours, as a store written by other means than a fold would be),
then for the same data:

- keep one hour again: the work a fold adds when an interval of ingest touched every GPU;
- `slicemeter export` (child process: wall, CPU, peak RSS) from the kept hours, and from a
  copy of the store whose kept tables are empty (the from-scratch path), files compared;
- reference in the same run: one plain aggregate over the month's slice_hour rows.

    python bench/bench_kept_money.py [--gpus 1000,8000] [--fresh]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

from bench_export import MONTH, export, reference  # noqa: E402

from slicemeter.chargeback.kept import forget_kept, keep_hours, kept_current  # noqa: E402
from slicemeter.chargeback.bill import parse_month  # noqa: E402
from slicemeter.store import connect  # noqa: E402
from slicemeter.testkit.synth_month import synth_month_db  # noqa: E402


def kept_db(gpus: int, fresh: bool) -> tuple[Path, float, float]:
    """The cached generated month with its money kept: (path, s to keep the month, s to keep one hour)."""
    cache = REPO / "var" / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    path = synth_month_db(cache / f"month-{gpus}.duckdb", MONTH, gpus, fresh)
    m_start, m_end = parse_month(MONTH)
    con = connect(path)
    try:
        month_s = 0.0
        if not kept_current(con, m_start, m_end):
            t = time.perf_counter()
            keep_hours(con, m_start, m_end)
            month_s = time.perf_counter() - t
        noon = datetime(m_start.year, m_start.month, 15, 12)
        t = time.perf_counter()
        keep_hours(con, noon, noon.replace(hour=13))
        hour_s = time.perf_counter() - t
        assert kept_current(con, m_start, m_end)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return path, month_s, hour_s


def without_kept(path: Path, dest: Path) -> Path:
    shutil.copyfile(path, dest)
    con = connect(dest)
    try:
        forget_kept(con)
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return dest


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", default="1000")
    ap.add_argument("--fresh", action="store_true", help="regenerate the cached months")
    args = ap.parse_args()
    for gpus in (int(g) for g in args.gpus.split(",") if g):
        path, month_s, hour_s = kept_db(gpus, args.fresh)
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            tmp = Path(tmp)
            scratch = without_kept(path, tmp / "scratch.duckdb")
            ref, gh, sh = reference(path)
            load = os.getloadavg()[0]
            k_wall, k_cpu, k_rss, _ = export(path, tmp / "kept")
            s_wall, s_cpu, s_rss, _ = export(scratch, tmp / "scratch")
            same = digests(tmp / "kept") == digests(tmp / "scratch")
        print(f"{gpus} GPUs ({gh} GPU-hours, {sh} slice-hours), load average {load:.1f}: "
              + (f"keeping the month {month_s:.1f} s, " if month_s else "")
              + f"keeping one hour again {hour_s:.2f} s; export from kept hours {k_wall:.2f} s wall, "
              f"{k_cpu:.2f} s CPU, peak RSS {k_rss:.2f} GiB; from scratch {s_wall:.2f} s wall, {s_cpu:.2f} s CPU, "
              f"{s_rss:.2f} GiB; files {'byte-identical' if same else 'DIFFER'}; reference one-pass aggregate "
              f"{ref:.3f} s (kept export {k_wall / max(ref, 1e-9):.0f}x, from scratch {s_wall / max(ref, 1e-9):.0f}x)",
              flush=True)
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
