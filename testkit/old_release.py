"""A previous release's own `slicemeter`, run from git history: the commit's tree (git
archive) installed into a folder without its dependencies, run with this checkout's Python
packages (DuckDB, kafka-python...). The upgrade fixture (tools/make_release_fixture.py) and
the migration kill bench (bench/bench_migrate_kills.py) write their stores with it."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from slicemeter.broker import TansuBroker

REPO = Path(__file__).resolve().parent.parent
RELEASE_0_2_0 = "047a43f"


@dataclass(frozen=True)
class OldRelease:
    commit: str
    tree: Path     # the commit's files (its examples/ among them)
    site: Path     # its packages, installed

    def run(self, *argv: str, cwd: Path, now: str) -> None:
        """`slicemeter ARGV` of this release on the clock `now`, its output appended to
        cwd/release.log; raises, naming the log, unless it exits 0."""
        print(f"+ slicemeter {self.commit}", " ".join(argv), flush=True)
        env = {**os.environ, "PYTHONPATH": str(self.site), "SLICEMETER_NOW": now}
        log = cwd / "release.log"
        with open(log, "a") as out:
            # not in the tree: `python -m` puts the working folder first on the path, and the
            # tree's slicemeter/ folder is not the installed package
            done = subprocess.run([sys.executable, "-m", "slicemeter.cli", *argv], cwd=cwd, env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
        if done.returncode != 0:
            tail = "\n".join(log.read_text().splitlines()[-20:])
            raise RuntimeError(f"slicemeter {self.commit} {argv[0]} exited {done.returncode}:\n{tail}")


def install(commit: str, folder: Path) -> OldRelease:
    """The release at `commit` installed under `folder` (tree/ and site/)."""
    tree, site = folder / "tree", folder / "site"
    tree.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(tree)],
                   check=True)
    return OldRelease(commit, tree, site)


def write_store(release: OldRelease, work: Path, *, start: str, days: str, interval: str, now: str,
                snapshot: Path | None = None) -> Path:
    """work/store.duckdb written by `release`: `days` of its examples/demo.yaml from `start`
    (a Tick every `interval` seconds) backfilled into a Tansu broker and ingested on the
    clock `now`, with a readers' file at `snapshot` if given."""
    store = work / "store.duckdb"
    scenario = str(release.tree / "examples/demo.yaml")
    with TansuBroker(log_path=work / "tansu.log") as broker:
        release.run("backfill", "--scenario", scenario, "--start", start, "--days", days, "--interval", interval,
                    "--kafka", broker.bootstrap, "--no-progress", cwd=work, now=now)
        reader = ["--snapshot", str(snapshot), "--snapshot-interval", "1"] if snapshot else []
        release.run("ingest", "--kafka", broker.bootstrap, "--db", str(store), "--tenants", scenario, *reader,
                    "--until-idle", "5", cwd=work, now=now)
    return store


def close_and_export(release: OldRelease, store: Path, work: Path, *, closed: str, months: list[str],
                     now: str) -> dict[str, Path]:
    """Close the month `closed`, then export each of `months`: month -> its invoice CSV."""
    prices = ("--prices", str(release.tree / "examples/prices.yaml"))
    release.run("close", "--db", str(store), "--month", closed, *prices, cwd=work, now=now)
    invoices = {}
    for month in months:
        out = work / f"export-{month}"
        release.run("export", "--db", str(store), "--month", month, "--out", str(out), *prices, cwd=work, now=now)
        invoices[month] = next(out.glob("invoice*.csv"))
    return invoices


def money_per_tenant(invoice: Path) -> dict[str, Decimal]:
    """An invoice CSV's charge per tenant, exactly."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    with open(invoice, newline="") as f:
        for row in csv.DictReader(f):
            totals[row["tenant"]] += Decimal(row["charge"])
    return dict(totals)
