"""Write tests/data/release-0.2.0/: a store, its readers' file and its exports, made by
release 0.2.0's own code (commit 047a43f), for the upgrade tests (tests/test_upgrade.py).

    .venv/bin/python tools/make_release_fixture.py [--out tests/data/release-0.2.0]

It runs that commit's own `slicemeter` (testkit/old_release.py): backfill two days of
examples/demo.yaml (a Tick every 5 minutes) across the turn of October into a Tansu broker,
ingest them with a readers' file, close October, export October (closed) and November (open).
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
from pathlib import Path

from slicemeter.testkit.old_release import RELEASE_0_2_0, close_and_export, install, write_store

REPO = Path(__file__).resolve().parent.parent
START, DAYS, NOW, INTERVAL = "2026-10-31", "2", "2026-11-02T06:00Z", "300"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests/data/release-0.2.0")
    parser.add_argument("--start", default=START, help="first day backfilled (default %(default)s)")
    parser.add_argument("--days", default=DAYS, help="days backfilled (default %(default)s)")
    parser.add_argument("--interval", default=INTERVAL, help="seconds between Ticks (default %(default)s)")
    parser.add_argument("--now", default=NOW, help="the clock ingest runs on (default %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slicemeter-release-") as tmp:
        tmp = Path(tmp)
        work = tmp / "work"
        work.mkdir()
        release = install(RELEASE_0_2_0, tmp)
        snapshot = work / "snapshot.duckdb"
        store = write_store(release, work, start=args.start, days=args.days, interval=args.interval, now=args.now,
                            snapshot=snapshot)
        invoices = close_and_export(release, store, work, closed="2026-10", months=["2026-10", "2026-11"],
                                    now=args.now)
        args.out.mkdir(parents=True, exist_ok=True)
        for db in (store, snapshot):   # DuckDB files are mostly empty blocks: a tenth gzipped
            with open(db, "rb") as src, gzip.GzipFile(args.out / f"{db.name}.gz", "wb", mtime=0) as dst:
                shutil.copyfileobj(src, dst)
        for month, invoice in invoices.items():
            shutil.copyfile(invoice, args.out / f"invoice-{month}.csv")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
