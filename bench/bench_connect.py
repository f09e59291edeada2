"""What a connection to a store file costs: every command, dashboard page, ingest cursor and
readers' refresh opens one, and each gets the views and macros of sql/views/.

Times, in CPU seconds of this process (DuckDB's threads included), the median of `--rounds`:

- new: `store.connect` of a path with no file (the schema made, the macros kept in it);
- read-write, read-only: `store.connect` of that store again;
- read-only, own macros: the same on a store whose kept macros are of another text
  (what a reader of a store not yet opened by this release pays: TEMP macros of its own);
- reference: `duckdb.connect` of the same file, nothing applied.

    python bench/bench_connect.py [--rounds 20]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from slicemeter import store


def cpu_of(open_one, rounds: int) -> float:
    """Median CPU seconds of open_one() followed by the connection's close."""
    spent = []
    for i in range(rounds):
        t = time.process_time()
        open_one(i).close()
        spent.append(time.process_time() - t)
    return statistics.median(spent)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-connect-") as tmp:
        folder = Path(tmp)
        db = folder / "store.duckdb"
        store.connect(db).close()
        stale = folder / "stale.duckdb"
        store.connect(stale).close()
        with duckdb.connect(str(stale)) as con:   # kept macros of another text: the stamp renamed
            (name,) = con.execute("SELECT view_name FROM duckdb_views() WHERE starts_with(view_name, "
                                  "'slicemeter_views_')").fetchone()
            con.execute(f'ALTER VIEW "{name}" RENAME TO slicemeter_views_0000000000000000')
        figures = {
            "new": cpu_of(lambda i: store.connect(folder / f"new-{i}.duckdb"), args.rounds),
            "read-write": cpu_of(lambda i: store.connect(db), args.rounds),
            "read-only": cpu_of(lambda i: store.connect(db, read_only=True), args.rounds),
            "read-only, own macros": cpu_of(lambda i: store.connect(stale, read_only=True), args.rounds),
            "reference": cpu_of(lambda i: duckdb.connect(str(db)), args.rounds),
        }
    load = os.getloadavg()[0]
    ref = figures["reference"]
    for name, seconds in figures.items():
        ratio = f"  {seconds / ref:6.1f}x the reference" if name != "reference" and ref else ""
        print(f"{name:28s} {seconds * 1000:8.1f} ms CPU{ratio}")
    print(f"load average {load:.1f}, {args.rounds} rounds each (median)")


if __name__ == "__main__":
    main()
