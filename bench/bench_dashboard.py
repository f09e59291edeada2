"""Dashboard page render time for a month of a demo-sized fleet (and a 4x one).

Each page is run with streamlit.testing's AppTest: cold (first run, queries hit DuckDB) and
warm (a rerun, cached queries: what a user clicking around sees). Reference, measured in
the same run: an empty Streamlit page (the framework's own cost per run).

    python bench/bench_dashboard.py [--copies 1,4]
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

PAGES = ["fleet", "tenants", "gpus", "waste", "exports", "right_sizing"]


def timed(at: AppTest) -> float:
    t = time.perf_counter()
    at.run()
    assert not at.exception, at.exception
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", default="1,4", help="fleet sizes: copies of the 5-node, 10-GPU fixture fleet")
    ap.add_argument("--repeat", type=int, default=5)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        empty = Path(tmp) / "empty.py"
        empty.write_text("import streamlit as st\nst.write('x')\n")
        ref = AppTest.from_file(str(empty))
        timed(ref)
        ref_s = statistics.median(timed(ref) for _ in range(opts.repeat))
        print(f"reference: empty Streamlit page {ref_s * 1000:.1f} ms per run")
        for copies in (int(c) for c in opts.copies.split(",")):
            db = build_fleet_db(Path(tmp) / f"fleet{copies}.duckdb", "2026-11", copies=copies)
            os.environ["SLICEMETER_DB"] = str(db)
            at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=120)
            timed(at)  # imports, first connection
            print(f"\nfleet x{copies}: {5 * copies} nodes, {10 * copies} GPUs, one month (720 h)")
            print(f"{'page':<14}{'cold s':>8}{'warm s':>8}{'warm/ref':>10}")
            worst = 0.0
            for page in PAGES:
                at.switch_page(f"views/{page}.py")
                cold = timed(at)
                warm = statistics.median(timed(at) for _ in range(opts.repeat))
                worst = max(worst, warm)
                print(f"{page:<14}{cold:>8.3f}{warm:>8.3f}{warm / ref_s:>10.1f}")
            print(f"slowest warm page: {worst:.3f} s (target <= 1 s)")


if __name__ == "__main__":
    main()
