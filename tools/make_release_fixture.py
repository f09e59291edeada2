"""Write tests/data/release-0.2.0/: a store, its readers' file and its exports, made by
release 0.2.0's own code (commit 047a43f), for the upgrade tests (tests/test_upgrade.py).

    .venv/bin/python tools/make_release_fixture.py [--out tests/data/release-0.2.0]

It installs that commit's tree (git archive) into a temporary folder, then runs its
`slicemeter` with this checkout's Python packages (DuckDB, kafka-python...): backfill two
days of examples/demo.yaml (a Tick every 5 minutes) across the turn of October into a Tansu broker, ingest them
with a readers' file, close October, export October (closed) and November (open).
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from slicemeter.broker import TansuBroker

REPO = Path(__file__).resolve().parent.parent
COMMIT = "047a43f"
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
        tree, site, work = tmp / "tree", tmp / "site", tmp / "work"
        tree.mkdir()
        work.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", COMMIT], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(tree)],
                       check=True)
        env = {**os.environ, "PYTHONPATH": str(site), "SLICEMETER_NOW": args.now}
        old = [sys.executable, "-m", "slicemeter.cli"]

        def run(*argv: str) -> None:
            print("+ slicemeter", " ".join(argv), flush=True)
            # not in the tree: `python -m` puts the working folder first on the path, and the
            # tree's slicemeter/ folder is not the installed package
            subprocess.run([*old, *argv], cwd=work, env=env, check=True)

        store, snapshot = work / "store.duckdb", work / "snapshot.duckdb"
        with TansuBroker(log_path=tmp / "tansu.log") as broker:
            run("backfill", "--scenario", str(tree / "examples/demo.yaml"), "--start", args.start, "--days", args.days,
                "--interval", args.interval, "--kafka", broker.bootstrap, "--no-progress")
            run("ingest", "--kafka", broker.bootstrap, "--db", str(store),
                "--tenants", str(tree / "examples/demo.yaml"),
                "--snapshot", str(snapshot), "--snapshot-interval", "1", "--until-idle", "5")
        prices = ("--prices", str(tree / "examples/prices.yaml"))
        run("close", "--db", str(store), "--month", "2026-10", *prices)
        for month in ("2026-10", "2026-11"):
            run("export", "--db", str(store), "--month", month, "--out", str(work / f"export-{month}"), *prices)
        args.out.mkdir(parents=True, exist_ok=True)
        for db in (store, snapshot):   # DuckDB files are mostly empty blocks: a tenth gzipped
            with open(db, "rb") as src, gzip.GzipFile(args.out / f"{db.name}.gz", "wb", mtime=0) as dst:
                shutil.copyfileobj(src, dst)
        for month in ("2026-10", "2026-11"):
            invoice = next((work / f"export-{month}").glob("invoice*.csv"))
            shutil.copyfile(invoice, args.out / f"invoice-{month}.csv")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
