"""Dashboard page render time for a month of a fleet: the demo-sized fixture fleet (and a 4x
one), and large generated fleets (--gpus 1000,8000).

Each page is run with streamlit.testing's AppTest: cold (first run, queries hit DuckDB) and
warm (a rerun, cached queries: what a user clicking around sees). Reference, measured in
the same run: an empty Streamlit page (the framework's own cost per run).

--copies: copies of the 5-node, 10-GPU fixture fleet (testkit/fleet_fixture.py).
--gpus: a month of hourly rollups generated straight into DuckDB (testkit/synth_month.py,
2-3 slices per GPU); cached under var/bench/ (generating 8,000 GPUs takes minutes).

    python bench/bench_dashboard.py [--copies 1,4] [--gpus 1000,8000] [--fresh]

The pages here read a store file with no money kept; bench_pages_after_refresh.py measures
what a user meets as ingest runs: the readers' file just refreshed, the money kept.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from streamlit.testing.v1 import AppTest

from slicemeter.testkit.fleet_fixture import build_fleet_db
from slicemeter.testkit.synth_month import synth_month_db

PAGES = ["fleet", "tenants", "gpus", "waste", "exports", "right_sizing"]
MONTH = "2026-11"
WARM_TARGET_S = 2.0


def timed(at: AppTest) -> float:
    return timed_cpu(at)[0]


def timed_cpu(at: AppTest) -> tuple[float, float]:
    """(wall s, this process's CPU s) of one run: AppTest runs the script in a thread here,
    so on a loaded shared machine the CPU time is the steadier figure."""
    t, c = time.perf_counter(), time.process_time()
    at.run()
    assert not at.exception, at.exception
    return time.perf_counter() - t, time.process_time() - c


def empty_page_s(repeat: int) -> float:
    """The reference: median s of a run of an empty Streamlit page (the framework's own cost)."""
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.py"
        empty.write_text("import streamlit as st\nst.write('x')\n")
        ref = AppTest.from_file(str(empty))
        timed(ref)
        return statistics.median(timed(ref) for _ in range(repeat))


def bench_pages(db: Path, title: str, repeat: int, ref_s: float, pages: list[str]) -> float:
    os.environ["SLICEMETER_DB"] = str(db)
    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=600)
    timed(at)  # imports, first connection
    print(f"\n{title}, one month (720 h); load average {os.getloadavg()[0]:.1f}")
    print(f"{'page':<14}{'cold s':>8}{'cold cpu':>9}{'warm s':>8}{'warm cpu':>9}{'warm/ref':>10}")
    worst = 0.0
    for page in pages:
        at.switch_page(f"views/{page}.py")
        cold, cold_cpu = timed_cpu(at)
        runs = [timed_cpu(at) for _ in range(repeat)]
        warm, warm_cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        worst = max(worst, warm)
        print(f"{page:<14}{cold:>8.3f}{cold_cpu:>9.3f}{warm:>8.3f}{warm_cpu:>9.3f}{warm / ref_s:>10.1f}", flush=True)
    print(f"slowest warm page: {worst:.3f} s (target <= {WARM_TARGET_S:g} s, "
          f"{'OK' if worst <= WARM_TARGET_S else 'OVER'})")
    return worst


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", default="1,4", help="fleet sizes: copies of the 5-node, 10-GPU fixture fleet ('' for none)")
    ap.add_argument("--gpus", default="", help="generated fleet sizes in GPUs, e.g. 1000,8000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--fresh", action="store_true", help="regenerate the cached generated fleets")
    ap.add_argument("--pages", default=",".join(PAGES), help="pages to measure (default: all)")
    opts = ap.parse_args()
    pages = opts.pages.split(",")
    cache = REPO / "var" / "bench"
    ref_s = empty_page_s(opts.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        print(f"reference: empty Streamlit page {ref_s * 1000:.1f} ms per run")
        for copies in (int(c) for c in opts.copies.split(",") if c):
            db = build_fleet_db(Path(tmp) / f"fleet{copies}.duckdb", MONTH, copies=copies)
            bench_pages(db, f"fleet x{copies}: {5 * copies} nodes, {10 * copies} GPUs", opts.repeat, ref_s, pages)
        for gpus in (int(g) for g in opts.gpus.split(",") if g):
            cache.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            db = synth_month_db(cache / f"month-{gpus}.duckdb", MONTH, gpus, opts.fresh)
            built = time.perf_counter() - t
            bench_pages(db, f"generated fleet: {gpus} GPUs on {gpus // 8} nodes"
                        + (f" (generated in {built:.0f} s)" if built > 1 else ""), opts.repeat, ref_s, pages)


if __name__ == "__main__":
    main()
