"""A lake's schema against the release's: readers refuse a lake an older release left (or a
newer one migrated) with one sentence, `slicemeter migrate` brings it up in one lake
transaction and records the release."""
from __future__ import annotations

import subprocess
from pathlib import Path

import duckdb
import pytest

import slicemeter
from slicemeter import store
from slicemeter.common import SchemaMismatch
from slicemeter.store import lake
from slicemeter.testkit.ingest_helpers import SLICEMETER

REPO = Path(__file__).resolve().parents[2]


def slicemeter_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SLICEMETER, *args], cwd=REPO, capture_output=True, text=True, timeout=180)


def _as_an_older_release_left_it(target: str) -> None:
    con = lake.connect(target, upgrade=False, check=False)
    try:
        con.execute("DROP TABLE lake.main.tenant_budgets")
        con.execute("ALTER TABLE lake.main.slice_hour DROP COLUMN usage_unverified_s")
    finally:
        con.close()


def test_an_older_lake_is_refused_then_migrated_and_recorded(lake_db):
    target, _ = lake_db
    _as_an_older_release_left_it(target)
    done = slicemeter_cli("report", "--db", target, "--month", "2026-11")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "lacks 2 table(s) or column(s)" in done.stderr and "slicemeter migrate --db" in done.stderr
    assert "postgres" not in done.stderr   # the lake's name may hold a password
    status = slicemeter_cli("migrate", "--db", target, "--status")
    assert status.returncode == 1 and "pending: table tenant_budgets" in status.stdout
    assert "pending: column slice_hour.usage_unverified_s" in status.stdout
    done = slicemeter_cli("migrate", "--db", target)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "migrate: 2/2" in done.stderr
    status = slicemeter_cli("migrate", "--db", target, "--status")
    assert status.returncode == 0 and "this release's schema" in status.stdout
    assert status.stdout.count(f"slicemeter {slicemeter.__version__}: applied") == 2   # created, then migrated
    store.connect(target, read_only=True).close()


def test_a_lake_a_newer_release_migrated_is_refused(lake_db):
    target, _ = lake_db
    con = lake.connect(target)
    try:
        con.execute("INSERT INTO lake.main.schema_releases VALUES ('9.0.0', ['table future'], 1, now())")
    finally:
        con.close()
    with pytest.raises(SchemaMismatch, match="migrated by a newer release"):
        store.connect(target, read_only=True)
