"""Upgrading in place: a store and a readers' file written by release 0.2.0's own code
(tests/data/release-0.2.0, made by tools/make_release_fixture.py: two days of
examples/demo.yaml across the turn of October, October closed), then this release on them."""
from __future__ import annotations

import gzip
import os
import shutil
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

import slicemeter
from slicemeter import store
from slicemeter.store import schema
from slicemeter.testkit.ingest_helpers import SLICEMETER
from slicemeter.testkit.old_release import money_per_tenant

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests/data/release-0.2.0"
PRICES = str(REPO / "examples/prices.yaml")
NOW = "2026-11-02T06:00Z"   # the clock the fixture was ingested on
OLD_MIGRATIONS = 7           # what release 0.2.0 applied (001-005, 020, 100)


def slicemeter_cli(*args: str, timeout: float = 180, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*SLICEMETER, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "SLICEMETER_NOW": NOW, **(env or {})})


def unpack(name: str, dest: Path) -> Path:
    with gzip.open(FIXTURE / f"{name}.gz", "rb") as src, open(dest, "wb") as out:
        shutil.copyfileobj(src, out)
    return dest


@pytest.fixture
def old_store(tmp_path) -> Path:
    return unpack("store.duckdb", tmp_path / "store.duckdb")


def export_money(db: Path, month: str, out: Path) -> dict[str, Decimal]:
    done = slicemeter_cli("export", "--db", str(db), "--month", month, "--out", str(out), "--prices", PRICES)
    assert done.returncode == 0, done.stderr[-3000:]
    return money_per_tenant(out / f"invoice-{month}.csv")


def reading_commands(db: Path, out: Path) -> dict[str, list[str]]:
    return {
        "export": ["export", "--db", str(db), "--month", "2026-10", "--out", str(out / "export"), "--prices", PRICES],
        "report": ["report", "--db", str(db), "--month", "2026-10", "--prices", PRICES],
        "recommend": ["recommend", "--db", str(db), "--month", "2026-11", "--prices", PRICES],
        "keep": ["keep", "--db", str(db), "--month", "2026-11"],
        "bindings": ["bindings", "list", "--db", str(db)],
        "close": ["close", "--db", str(db), "--month", "2026-11", "--prices", PRICES],
    }


def test_every_command_refuses_the_older_store_with_one_sentence_then_works_after_migrate(old_store, tmp_path):
    total = len(schema.shipped())
    pending = total - OLD_MIGRATIONS
    before = old_store.read_bytes()
    for name, argv in [*reading_commands(old_store, tmp_path).items(),
                       ("dashboard", ["dashboard", "--db", str(old_store), "--port", "1"])]:
        done = slicemeter_cli(*argv)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, (name, done.stderr)
        holds = f"holds {OLD_MIGRATIONS} of the {total} schema migrations slicemeter {slicemeter.__version__} needs"
        assert (holds in lines[0]
                and f"run `slicemeter migrate --db {old_store}`" in lines[0]), (name, lines[0])
    assert old_store.read_bytes() == before, "a refusing command changed the store"

    status = slicemeter_cli("migrate", "--db", str(old_store), "--status")
    assert status.returncode == 1 and "older than this release's" in status.stdout
    assert status.stdout.count("pending: ") == pending

    done = slicemeter_cli("migrate", "--db", str(old_store))
    assert done.returncode == 0, done.stderr[-3000:]
    progress = [ln for ln in done.stdout.splitlines() if ln.startswith("migrate: ") and f"/{pending} " in ln]
    assert len(progress) == pending and progress[-1].startswith(f"migrate: {pending}/{pending} ")
    again = slicemeter_cli("migrate", "--db", str(old_store))
    assert again.returncode == 0 and "nothing to do" in again.stdout

    status = slicemeter_cli("migrate", "--db", str(old_store), "--status")
    assert status.returncode == 0 and "this release's schema" in status.stdout, status.stdout
    assert f"(unrecorded): applied {OLD_MIGRATIONS}, held {OLD_MIGRATIONS}" in status.stdout
    assert f"slicemeter {slicemeter.__version__}: applied {pending}, held {total}" in status.stdout

    for name, argv in reading_commands(old_store, tmp_path).items():
        done = slicemeter_cli(*argv)
        assert done.returncode == 0, (name, done.stderr[-3000:])

    # October closed and November open (closed just now, by `close` above) bill as 0.2.0 exported them
    for month in ("2026-10", "2026-11"):
        assert export_money(old_store, month, tmp_path / month) == money_per_tenant(FIXTURE / f"invoice-{month}.csv")


def test_a_readers_file_of_the_older_release_is_refused_as_being_upgraded(tmp_path):
    snapshot = unpack("snapshot.duckdb", tmp_path / "snapshot.duckdb")
    for argv in (["export", "--db", str(snapshot), "--month", "2026-10", "--out", str(tmp_path / "e")],
                 ["migrate", "--db", str(snapshot)]):
        done = slicemeter_cli(*argv)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "is a readers' file" in done.stderr and "being upgraded" in done.stderr


def test_the_dashboard_on_an_older_readers_file_says_it_is_being_upgraded(tmp_path, monkeypatch):
    from slicemeter.testkit.dashboard_app import run_app

    snapshot = unpack("snapshot.duckdb", tmp_path / "snapshot.duckdb")
    at = run_app(snapshot, monkeypatch)
    assert [i.value for i in at.info if i.value.startswith("Being upgraded: ")], [e.value for e in at.error]


def test_the_dashboard_on_the_migrated_store_shows_its_months(old_store, monkeypatch):
    from slicemeter.testkit.dashboard_app import run_app

    assert slicemeter_cli("migrate", "--db", str(old_store)).returncode == 0
    at = run_app(old_store, monkeypatch)
    assert not at.info and not at.error, ([i.value for i in at.info], [e.value for e in at.error])
    assert {"2026-10", "2026-11"} <= set(at.sidebar.selectbox[0].options)


def test_a_migration_leaves_nothing_pinned_in_memory_and_runs_within_a_small_limit(old_store):
    """The reported crash: ingest migrated with DuckDB's default limit (80 % of the
    machine), then could not lower it, because the migrated tables waited in memory for a
    checkpoint. Now the limit holds from the first statement and the migration checkpoints."""
    con = store.connect(old_store, upgrade=True, memory_limit="24MB")
    try:
        pinned = con.execute("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory() "
                             "WHERE tag = 'IN_MEMORY_TABLE'").fetchone()[0]
        assert pinned < 4 << 20
        con.execute("SET memory_limit = '16MB'")
        assert schema.state(con).current
    finally:
        con.close()


def test_a_store_of_a_newer_release_is_refused_by_every_command_and_by_migrate(old_store, tmp_path):
    assert slicemeter_cli("migrate", "--db", str(old_store)).returncode == 0
    with duckdb.connect(str(old_store)) as con:
        con.execute("INSERT INTO schema_migrations (name) VALUES ('999_from_the_future.sql')")
        con.execute("INSERT INTO schema_releases (release, applied, holds) "
                    "VALUES ('9.0.0', ['999_from_the_future.sql'], 1 + (FROM schema_migrations SELECT count(*)))")
    for argv in [reading_commands(old_store, tmp_path)["export"], ["migrate", "--db", str(old_store)]]:
        done = slicemeter_cli(*argv)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "newer release than slicemeter" in done.stderr and "999_from_the_future.sql" in done.stderr


@pytest.mark.broker
def test_ingest_first_start_on_the_older_store_migrates_rebuilds_the_readers_file_and_goes_on(
        old_store, tmp_path, broker):
    """No explicit migrate: ingest at its default memory limit migrates, goes on storing the
    next hours, and rebuilds the readers' file the older release wrote; the money of the
    closed month stays what 0.2.0 exported."""
    snapshot = unpack("snapshot.duckdb", tmp_path / "snapshot.duckdb")
    later = {"SLICEMETER_NOW": "2026-11-02T12:00Z"}
    done = slicemeter_cli("backfill", "--scenario", str(REPO / "examples/demo.yaml"), "--start", "2026-11-02T00:00",
                          "--days", "0.25", "--interval", "300", "--kafka", broker.bootstrap, "--no-progress",
                          env=later)
    assert done.returncode == 0, done.stderr[-3000:]
    done = slicemeter_cli("ingest", "--kafka", broker.bootstrap, "--db", str(old_store),
                          "--tenants", str(REPO / "examples/demo.yaml"), "--snapshot", str(snapshot),
                          "--snapshot-interval", "1", "--until-idle", "3", env=later)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "migrated" in done.stderr
    assert snapshot.is_symlink(), "the readers' file of 0.2.0 was not rebuilt"
    october = export_money(snapshot, "2026-10", tmp_path / "oct")
    assert october == money_per_tenant(FIXTURE / "invoice-2026-10.csv")
    november = export_money(snapshot, "2026-11", tmp_path / "nov")
    before = money_per_tenant(FIXTURE / "invoice-2026-11.csv")
    assert set(november) == set(before) and all(november[t] >= before[t] for t in before)
    assert sum(november.values()) > sum(before.values())
    con = duckdb.connect(str(old_store), read_only=True)
    try:
        newest = con.execute("SELECT max(ts_ms) FROM raw_gpu_rows").fetchone()[0]
        assert newest >= datetime(2026, 11, 2, 5, tzinfo=timezone.utc).timestamp() * 1000
        releases = con.execute("SELECT release FROM schema_releases ORDER BY migrated_at").fetchall()
    finally:
        con.close()
    assert releases == [(schema.UNRECORDED,), (slicemeter.__version__,)]


def _layout(path: Path) -> tuple[list, list, list]:
    with duckdb.connect(str(path), read_only=True) as con:
        tables = con.execute("SELECT table_name, sql FROM duckdb_tables() ORDER BY 1").fetchall()
        columns = con.execute("SELECT table_name, column_name, data_type, column_default, is_nullable "
                              "FROM duckdb_columns() ORDER BY table_name, column_index").fetchall()
        rows = con.execute("SELECT count(*), sum(hash(COLUMNS(*))) FROM raw_slice_rows").fetchall()
    return [t for t in tables if not t[0].startswith("schema_")], columns, rows


def test_columns_added_to_a_large_table_by_rewriting_it_equal_the_alter_tables(tmp_path, monkeypatch):
    """The runner adds columns to a table of more than REWRITE_ROWS rows by moving its rows
    into an empty copy (within the memory limit); the table it leaves is the one ALTER TABLE
    would have: the same CREATE statement, columns, defaults and rows."""
    altered = unpack("store.duckdb", tmp_path / "altered.duckdb")
    rewritten = unpack("store.duckdb", tmp_path / "rewritten.duckdb")
    monkeypatch.setattr(schema, "REWRITE_ROWS", 10 ** 12)
    store.connect(altered, upgrade=True).close()
    monkeypatch.setattr(schema, "REWRITE_ROWS", 0)
    store.connect(rewritten, upgrade=True, memory_limit="24MB").close()
    assert _layout(rewritten) == _layout(altered)


KILL_POINTS = ["before:021_dead_letter_digest.sql", "before:031_tick_1_2.sql", "before:060_kept_money.sql",
               "commit", "checkpoint"]


@pytest.mark.parametrize("point", KILL_POINTS)
def test_migrate_killed_at_any_point_leaves_the_old_or_the_new_schema_and_a_rerun_completes(old_store, tmp_path,
                                                                                            point):
    log = tmp_path / "migrate.log"
    with open(log, "w") as err:
        proc = subprocess.Popen([*SLICEMETER, "migrate", "--db", str(old_store)], cwd=REPO, stdout=subprocess.DEVNULL,
                                stderr=err, env={**os.environ, schema.PAUSE_ENV: point})
    try:
        deadline = time.monotonic() + 120
        while f"migrate paused at {point}" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with duckdb.connect(str(old_store), read_only=True) as con:
        found = schema.state(con)
    # committed or not: never part of the migrations
    assert len(found.applied) == (len(schema.shipped()) if point == "checkpoint" else OLD_MIGRATIONS)
    done = slicemeter_cli("migrate", "--db", str(old_store))
    assert done.returncode == 0, done.stderr[-3000:]
    for month in ("2026-10", "2026-11"):
        assert export_money(old_store, month, tmp_path / month) == money_per_tenant(FIXTURE / f"invoice-{month}.csv")
