"""Benchmark: monthly export (chargeback + invoice CSV + Parquet detail + FOCUS CSV/Parquet).

Two months of hourly rollups are generated straight into DuckDB (testkit/synth_month.py):
the demo fleet's size (10 GPUs, 2-3 slices each) and a large fleet (8,000 GPUs, ~20,000
slices, ~5.6 M GPU-hours and ~12.6 M slice-hours). Targets: <= 2 s and <= 30 s per export.
Reference measured in the same run: one plain DuckDB aggregate over the same slice_hour rows
(Σ share-seconds by tenant), i.e. the cost of just reading the month once.
The large database is cached under var/bench/ (generating it takes a minute or two).

    python bench/bench_export.py [--gpus 8000] [--fresh]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from slicemeter.chargeback.bill import compute_bill
from slicemeter.testkit.synth_month import synthesize_month
from slicemeter.chargeback.exports import write_exports
from slicemeter.store import connect

MONTH = "2026-11"


def build(path: Path, gpus: int, fresh: bool) -> float:
    if path.exists() and not fresh:
        return 0.0
    path.unlink(missing_ok=True)
    t = time.perf_counter()
    con = connect(path)
    synthesize_month(con, MONTH, gpus=gpus)
    con.close()
    return time.perf_counter() - t


def measure(path: Path, out: Path) -> tuple[float, float, float, int, int, str]:
    con = connect(path)
    t = time.perf_counter()
    con.execute("SELECT tenant, sum(alloc_dominant_share_s), sum(usage_share_s) FROM slice_hour_tenant "
                "GROUP BY tenant").fetchall()
    ref = time.perf_counter() - t
    t, c = time.perf_counter(), time.process_time()
    bill = compute_bill(con, MONTH)
    files = write_exports(con, bill, out)
    took, cpu = time.perf_counter() - t, time.process_time() - c
    gpu_hours, slice_hours = (con.execute("SELECT count(*) FROM gpu_hour").fetchone()[0],
                              con.execute("SELECT count(*) FROM slice_hour").fetchone()[0])
    con.close()
    assert len(files) == 5
    return took, cpu, ref, gpu_hours, slice_hours, f"{bill.total} {bill.currency}"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8000)
    ap.add_argument("--fresh", action="store_true", help="regenerate the cached large database")
    args = ap.parse_args()
    cache = REPO / "var" / "bench"
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for label, gpus, target, path in (
            ("demo fleet", 10, 2.0, Path(tmp) / "demo.duckdb"),
            ("large fleet", args.gpus, 30.0, cache / f"export-{args.gpus}.duckdb"),
        ):
            built = build(path, gpus, args.fresh or gpus == 10)
            load = os.getloadavg()[0]
            took, cpu, ref, gh, sh, total = measure(path, Path(tmp) / f"out-{gpus}")
            print(f"export {label}: {gpus} GPUs, {gh} GPU-hours, {sh} slice-hours -> {took:.2f} s "
                  f"(CPU time {cpu:.2f} s over {os.cpu_count()} cores, load average {load:.1f} before) "
                  f"(target <= {target:.0f} s, {'OK' if took <= target else 'OVER'}); "
                  f"reference one-pass aggregate {ref:.3f} s, ratio {took / max(ref, 1e-9):.1f}x; "
                  f"invoice total {total}" + (f"; generated in {built:.1f} s" if built else ""))
    print("note: wall time on a shared machine depends on its load; CPU time is the steadier figure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
