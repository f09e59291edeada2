"""`slicemeter migrate` SIGKILLed at points spread over the migration of a store that
release 0.2.0's own code wrote from a month of examples/demo.yaml: each time the store must
hold exactly the old schema or the new one (its migrations and every table's columns),
a rerun must complete, and October (closed) and November (open) must export as the old
release exported them, tenant by tenant to the cent.

    .venv/bin/python bench/bench_migrate_kills.py [--points P,P,...] [--rebuild]

The old release's store (closed October included) and its two invoices are made once
(testkit/old_release.py: 2026-10-01 to 2026-11-03, a Tick every 60 s) and kept under
var/bench/migrate-kills/. Each kill point is a `SLICEMETER_MIGRATE_PAUSE` point
(store/schema.py): migrate waits there, is SIGKILLed, and a copy of the old store is used
per point. An invoice whose header is the old release's must be byte-identical; one whose
columns changed is compared by its charge per tenant. Prints one line per kill point;
exits 1 naming every point that failed.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

from slicemeter.store import schema
from slicemeter.testkit.ingest_helpers import SLICEMETER
from slicemeter.testkit.old_release import (RELEASE_0_2_0, close_and_export, install, money_per_tenant,
                                            write_store)

REPO = Path(__file__).resolve().parent.parent
START, DAYS, INTERVAL, NOW = "2026-10-01", "33", "60", "2026-11-03T06:00Z"
CLOSED, MONTHS = "2026-10", ["2026-10", "2026-11"]
PRICES = REPO / "examples/prices.yaml"
# before anything changes; inside 030 and 031, once a large table's rows are in its copy;
# at the last migration; just before the commit; committed, before the checkpoint
POINTS = ["before:021_dead_letter_digest.sql", "rewritten:raw_slice_rows", "rewritten:raw_gpu_rows",
          "before:110_device_health.sql", "commit", "checkpoint"]
PAUSE_DEADLINE_S = 600


def cached_release_store(cache_root: Path, rebuild: bool) -> Path:
    """The folder holding store.duckdb and invoice-MONTH.csv of the old release."""
    folder = cache_root / f"{RELEASE_0_2_0}-{START}-{DAYS}d-{INTERVAL}s"
    if (folder / "done").exists() and not rebuild:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="slicemeter-release-") as tmp:
        tmp = Path(tmp)
        work = tmp / "work"
        work.mkdir()
        release = install(RELEASE_0_2_0, tmp)
        started = time.monotonic()
        store = write_store(release, work, start=START, days=DAYS, interval=INTERVAL, now=NOW)
        invoices = close_and_export(release, store, work, closed=CLOSED, months=MONTHS, now=NOW)
        print(f"old release's store written, closed and exported in {time.monotonic() - started:.0f} s", flush=True)
        building = cache_root / (folder.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        shutil.copyfile(store, building / "store.duckdb")
        for month, invoice in invoices.items():
            shutil.copyfile(invoice, building / f"invoice-{month}.csv")
        (building / "done").write_text(f"{RELEASE_0_2_0} {START} {DAYS} {INTERVAL} {NOW}\n")
        building.rename(folder)
    return folder


def cli(*argv: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*SLICEMETER, *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "SLICEMETER_NOW": NOW})


def layout(db: Path) -> tuple[list[str], list[tuple]]:
    """The migrations a store holds and every column of every table (type, default, null)."""
    with duckdb.connect(str(db), read_only=True) as con:
        applied = [row[0] for row in con.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()]
        columns = con.execute("SELECT table_name, column_name, data_type, column_default, is_nullable "
                              "FROM duckdb_columns() WHERE database_name = current_database() "
                              "ORDER BY table_name, column_index").fetchall()
    return applied, columns


def table_rows(db: Path) -> dict[str, int]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]
                for t in ("raw_gpu_rows", "raw_slice_rows")}


def migrate_until(db: Path, point: str, log: Path) -> float:
    """Run migrate on `db` until it waits at `point`, SIGKILL it: seconds it ran. Raises
    if it exits or overruns first."""
    started = time.monotonic()
    with open(log, "w") as err:
        proc = subprocess.Popen([*SLICEMETER, "migrate", "--db", str(db)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=err, env={**os.environ, "SLICEMETER_NOW": NOW, schema.PAUSE_ENV: point})
    try:
        while f"migrate paused at {point}" not in log.read_text():
            if proc.poll() is not None:
                raise RuntimeError(f"migrate exited {proc.returncode} before {point}: {log.read_text()[-500:]}")
            if time.monotonic() - started > PAUSE_DEADLINE_S:
                raise RuntimeError(f"migrate did not reach {point} in {PAUSE_DEADLINE_S} s")
            time.sleep(0.05)
        return time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def _rows(invoice: Path, columns: list[str]) -> list[tuple[str, ...]]:
    with open(invoice, newline="") as f:
        return [tuple(row[c] for c in columns) for row in csv.DictReader(f)]


def compare_invoice(old: Path, new: Path) -> tuple[str, str | None]:
    """(how `new` matched `old`, what differs or None). Byte-identical where the columns are
    the old release's; where columns were added, every old column of every line as text,
    in order; and in either case the charge per tenant as Decimal."""
    before, after = money_per_tenant(old), money_per_tenant(new)
    differ = sorted(t for t in before.keys() | after.keys() if before.get(t) != after.get(t))
    if differ:
        return "", "charge differs for " + ", ".join(f"{t} ({before.get(t)} -> {after.get(t)})" for t in differ)
    if old.read_bytes() == new.read_bytes():
        return "byte-identical", None
    with open(old, newline="") as f, open(new, newline="") as g:
        old_columns, new_columns = next(csv.reader(f)), next(csv.reader(g))
    if old_columns == new_columns:
        return "", "the same columns and charges per tenant, yet not byte-identical"
    if not set(old_columns) <= set(new_columns):
        return "equal per tenant", None
    if _rows(old, old_columns) != _rows(new, old_columns):
        return "", "a line's old columns differ"
    return f"old columns identical line by line (+{len(new_columns) - len(old_columns)} columns)", None


def export_and_compare(db: Path, folder: Path, reference: Path) -> tuple[list[str], list[str]]:
    """(what each month's comparison found, failures) for today's exports of `db`."""
    found, failures = [], []
    for month in MONTHS:
        out = folder / f"export-{month}"
        done = cli("export", "--db", str(db), "--month", month, "--out", str(out), "--prices", str(PRICES))
        if done.returncode != 0:
            failures.append(f"export {month} exited {done.returncode}: {done.stderr.strip()[-300:]}")
            continue
        how, problem = compare_invoice(reference / f"invoice-{month}.csv", out / f"invoice-{month}.csv")
        if problem:
            failures.append(f"{month}: {problem}")
        else:
            found.append(f"{month} {how}, {len(money_per_tenant(out / f'invoice-{month}.csv'))} tenants' charges equal")
    return found, failures


def one_point(point: str, reference: Path, folder: Path, old: tuple, new: tuple) -> tuple[str, list[str]]:
    db = folder / "store.duckdb"
    shutil.copyfile(reference / "store.duckdb", db)
    failures: list[str] = []
    try:
        ran = migrate_until(db, point, folder / "migrate.log")
    except RuntimeError as exc:
        return f"{point}: {exc}", [str(exc)]
    try:
        held = layout(db)
    except duckdb.Error as exc:   # a store the kill left unreadable
        return f"{point}: killed {ran:.1f} s in, the store cannot be read: {exc}", [str(exc)]
    verdict = "old" if held == old else "new" if held == new else "a mix"
    if verdict == "a mix":
        failures.append(f"killed, the store holds neither schema ({len(held[0])} migrations, {len(held[1])} columns)")
    status = cli("migrate", "--db", str(db), "--status")
    if status.returncode != (0 if verdict == "new" else 1):
        failures.append(f"`migrate --status` exited {status.returncode} on the {verdict} schema")
    started = time.monotonic()
    rerun = cli("migrate", "--db", str(db))
    rerun_s = time.monotonic() - started
    if rerun.returncode != 0:
        failures.append(f"the rerun exited {rerun.returncode}: {rerun.stderr.strip()[-300:]}")
    elif layout(db) != new:
        failures.append("after the rerun the store does not hold the new schema")
    found, export_failures = export_and_compare(db, folder, reference)
    failures += export_failures
    line = (f"{point}: killed {ran:.1f} s in, the store held the {verdict} schema ({len(held[0])} migrations); "
            f"rerun exit {rerun.returncode} in {rerun_s:.1f} s; " + "; ".join(found))
    return line + ("" if not failures else " -- FAILED: " + "; ".join(failures)), failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", default=",".join(POINTS), help="kill points (default %(default)s)")
    parser.add_argument("--cache", type=Path, default=REPO / "var/bench/migrate-kills")
    parser.add_argument("--rebuild", action="store_true", help="write the old release's store again")
    args = parser.parse_args()
    points = [p for p in args.points.split(",") if p]
    reference = cached_release_store(args.cache, args.rebuild)
    store = reference / "store.duckdb"
    rows = table_rows(store)
    print(f"old release's store: {store.stat().st_size / 1e6:.0f} MB, {rows['raw_gpu_rows']:,} GPU rows, "
          f"{rows['raw_slice_rows']:,} slice rows ({START}, {DAYS} days, a Tick every {INTERVAL} s)", flush=True)
    with tempfile.TemporaryDirectory(prefix="slicemeter-migrate-kills-") as tmp:
        tmp = Path(tmp)
        # the new schema as an uninterrupted migrate leaves it, and the old one
        whole = tmp / "whole"
        whole.mkdir()
        shutil.copyfile(store, whole / "store.duckdb")
        old = layout(whole / "store.duckdb")
        started = time.monotonic()
        done = cli("migrate", "--db", str(whole / "store.duckdb"))
        if done.returncode != 0:
            print(f"uninterrupted migrate exited {done.returncode}: {done.stderr[-2000:]}")
            return 1
        new = layout(whole / "store.duckdb")
        found, failures = export_and_compare(whole / "store.duckdb", whole, reference)
        print(f"uninterrupted: migrate {time.monotonic() - started:.1f} s ({len(old[0])} -> {len(new[0])} "
              f"migrations); " + "; ".join(found + failures), flush=True)
        failed = ["uninterrupted"] if failures else []
        shutil.rmtree(whole)
        for point in points:
            folder = tmp / point.replace(":", "_")
            folder.mkdir()
            line, failures = one_point(point, reference, folder, old, new)
            print(line, flush=True)
            if failures:
                failed.append(point)
            shutil.rmtree(folder)
    if failed:
        print(f"FAILED at {len(failed)} point(s): {', '.join(failed)}")
        return 1
    print(f"all {len(points)} kill points: the old or the new schema, a rerun completed, the money unchanged")
    return 0


if __name__ == "__main__":
    sys.exit(main())
