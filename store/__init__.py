"""The DuckDB store: open a database file with the schema applied.

`sql/schema/NNN_name.sql` are migrations, applied once each, in order, and recorded in
`schema_migrations`; store/schema.py applies every pending one in one transaction, records
the release in `schema_releases`, and makes every command but ingest and `slicemeter
migrate` refuse a store that lacks one (or holds one this release does not ship). A new
migration is a new file with the next free number of its range: never edit or renumber a
file a release has shipped (stores record them by name). Its statements run in the
migration transaction: no BEGIN/COMMIT or CHECKPOINT of its own, and DDL only of kinds
DuckDB rolls back. `ALTER TABLE t ADD COLUMN` on a large table is rewritten by the runner
to stay within ingest's memory limit (store/schema.py); keep such statements one per line,
in the form `ALTER TABLE name ADD COLUMN ...`. A lake gets new tables and columns from the
same files (store/lake.py ensure_schema); data changes there need code of their own.
`sql/views/NNN_name.sql` define TEMP views and macros and are applied on every connection
(read-write or read-only), so views always match the code reading them.
Numbering: 001-099 ingest, 100-199 chargeback and exports, 200-299 recommend,
300-399 dashboard.
"""
from __future__ import annotations

import contextlib
import importlib.resources
import logging
import time
from pathlib import Path

import duckdb

from slicemeter import __version__
from slicemeter.common import cluster_key, is_lake

log = logging.getLogger("slicemeter.store")


SQL_DIR = Path(str(importlib.resources.files("slicemeter.sql")))


def sql_text(name: str) -> str:
    """A statement file under sql/, e.g. sql_text('dashboard/fleet_summary.sql')."""
    return (SQL_DIR / name).read_text()


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection):
    """One DuckDB transaction: committed when the block ends, rolled back when it raises."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    try:
        con.execute("COMMIT")
    except duckdb.Error:
        try:
            con.execute("ROLLBACK")
        except duckdb.TransactionException:
            pass   # the failed COMMIT (a lake's write conflict) ended the transaction already
        raise


def is_write_conflict(exc: BaseException) -> bool:
    """A commit DuckLake refused because a concurrent one changed what this one changed
    (docs/upstream.md, DuckLake: `Transaction conflict - ...`): the work may be done again
    on the newer snapshot."""
    return isinstance(exc, duckdb.TransactionException) and "conflict" in str(exc).lower()


def retry_conflicts(work, attempts: int = 20, wait_s: float = 0.05):
    """`work()`, a transaction of its own, again while a lake refuses its commit for a
    concurrent one (two workers storing the catalog at once); other errors, and the last
    conflict, are raised. A file store never conflicts: one process writes it."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except duckdb.TransactionException as exc:
            if not is_write_conflict(exc) or attempt == attempts:
                raise
            time.sleep(wait_s * attempt)


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, **tables):
    """The Arrow tables or data frames `tables` readable by name in SQL on `con` for the block."""
    for name, table in tables.items():
        con.register(name, table)
    try:
        yield con
    finally:
        for name in tables:
            con.unregister(name)


def quote_literal(text: str) -> str:
    """A SQL string literal, for the few statements that take no parameters (ATTACH, LOAD)."""
    return "'" + text.replace("'", "''") + "'"


def quote_ident(name: str) -> str:
    """A SQL identifier (a table, column or catalog name read from the store, never typed in)."""
    return '"' + name.replace('"', '""') + '"'


def _numbered(folder: str) -> list[Path]:
    return sorted((SQL_DIR / folder).glob("[0-9][0-9][0-9]_*.sql"))


def register_functions(con: duckdb.DuckDBPyConnection) -> None:
    """The Python functions the views call, once per database instance (its connections and
    cursors share them): slicemeter_cluster_key is slicemeter.common.cluster_key, so a
    cluster identity has one canonical form in Python and in SQL."""
    def registered() -> bool:
        return bool(con.execute("SELECT 1 FROM duckdb_functions() WHERE function_name = 'slicemeter_cluster_key'"
                                ).fetchall())

    if not registered():
        try:
            con.create_function("slicemeter_cluster_key", cluster_key, ["VARCHAR"], "VARCHAR", side_effects=False)
        except duckdb.CatalogException:
            if not registered():   # else another thread's connection to the same database registered it between
                raise


def apply_views(con: duckdb.DuckDBPyConnection) -> None:
    """The views and macros, on every connection; on a connection (or cursor) with a lake
    attached, over the lake's tables, then the lake's own views (store/lake.py)."""
    from slicemeter.store import lake

    register_functions(con)
    on_lake = lake.is_lake_connection(con)
    if not on_lake:
        for path in _numbered("views"):
            con.execute(path.read_text())
        if is_reader_file(con):
            con.execute(sql_text("views/reader_days.sql"))
        return
    con.execute(f"USE {lake.ALIAS}")   # a cursor starts on the in-memory database
    # one transaction: each statement would otherwise read the lake's catalog afresh
    # (measured on a loaded machine: 4.7 s for the views, 0.2 s in one transaction)
    with transaction(con):
        for path in _numbered("views"):
            con.execute(path.read_text())
        lake.apply_lake_views(con)


# The readers' day figures (sql/schema/090_reader_days.sql, 092_reader_slice_sizing.sql; empty
# in a store): each table -> the macro of sql/views/305_day_figures.sql that computes it from
# the hours, and its time column. store/reader_file.py fills them; sql/ingest/reader_tables.sql
# leaves them out of the copy.
READER_DAY_FIGURES = {"reader_gpu_day": ("gpu_days_of_hours", "day"),
                      "reader_slice_day": ("slice_days_of_hours", "day"),
                      "reader_cluster_hour": ("cluster_hours_of_hours", "hour"),
                      "reader_kept_slice_day": ("kept_slice_days_of_hours", "day"),
                      "reader_kept_gpu_day": ("kept_gpu_days_of_hours", "day"),
                      "reader_health_event": ("gpu_health_noted_of_hours", "hour"),
                      "reader_health_event_slice": ("slices_on_noted_in", "hour"),
                      "reader_slice_sizing_day": ("slice_sizing_days_of_hours", "day")}


def reader_tables(con: duckdb.DuckDBPyConnection) -> list[tuple[str, bool, bool, bool]]:
    """The store's tables as a readers' file gets them: (name, with_rows, by_hour, by_day)
    (sql/ingest/reader_tables.sql)."""
    return con.execute(sql_text("ingest/reader_tables.sql"), {"day_tables": list(READER_DAY_FIGURES)}).fetchall()


# what a readers' file holds beside the store's tables
_READER_FILE_TABLES = ("reader_file_state", *READER_DAY_FIGURES)


def is_reader_file(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the connection's database is a readers' file written by a refresh
    (store/reader_file.py), which keeps the day figures of every day it holds."""
    return con.execute("SELECT count(*) = ? FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = 'main' AND table_name IN ?",
                       [len(_READER_FILE_TABLES), list(_READER_FILE_TABLES)]).fetchone()[0]


def migrate(con: duckdb.DuckDBPyConnection, progress=None) -> list[str]:
    """Apply pending migrations in one transaction (store/schema.py); returns the names applied."""
    from slicemeter.store import schema

    return schema.migrate(con, progress)


def fold_pending_rollups(con: duckdb.DuckDBPyConnection) -> None:
    """Fold the rollup deltas batches left pending into gpu_hour, slice_hour and
    gpu_inventory, in a transaction of its own (sql/schema/004_pending_rollups.sql), and
    keep the money of the GPU-hours it changed (sql/ingest/keep_money.sql)."""
    with transaction(con):
        con.execute(sql_text("ingest/fold_rollups.sql"))
        con.execute(sql_text("ingest/keep_money.sql"))


_PENDING_TABLES = ("gpu_inventory_pending", "gpu_hour_pending", "slice_hour_pending")


def has_pending_rollups(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether batches left rollup deltas to fold (False for a file from before the pending
    tables, which a read-only connection does not migrate)."""
    present = {row[0] for row in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name IN ?", [list(_PENDING_TABLES)]).fetchall()}
    if not present:
        return False
    return con.execute("SELECT " + " OR ".join(f"EXISTS (FROM {name})" for name in sorted(present))).fetchall()[0][0]


def connect(path: str | Path, read_only: bool = False, lake_data: str | Path | None = None,
            upgrade: bool = False, memory_limit: str | None = None) -> duckdb.DuckDBPyConnection:
    """Open the store; every connection gets the views. A new file is created with the
    schema; a store whose schema is not this release's raises schema.SchemaMismatch unless
    `upgrade` (ingest, `slicemeter migrate`) migrates it first. Read-write connections fold
    the rollup deltas an ingest that crashed left pending.

    `path` may name a DuckLake instead of a file, `ducklake:postgres:<conninfo>`
    (store/lake.py; `lake_data`: its Parquet folder, needed to create it).

    `memory_limit`: DuckDB's, set before anything runs, the migration included.

    A read-only connection must not show gpu_hour / slice_hour without those deltas (an
    export would bill short): where it finds some, no ingest holds the file (DuckDB lets a
    reader in only then; a running or cleanly stopped ingest leaves none behind), so the
    file is opened read-write once to fold them, then read-only again."""
    from slicemeter.store import schema

    if is_lake(path):
        from slicemeter.store import lake

        return lake.connect(str(path), read_only=read_only, data_path=lake_data, upgrade=upgrade)
    config = {"memory_limit": memory_limit} if memory_limit else {}
    con = duckdb.connect(str(path), read_only=read_only, config=config)
    try:
        found = schema.state(con)
        if found is not None and not found.current and not (upgrade and not found.unknown and not read_only):
            copy = not found.unknown and schema.is_readers_copy(con)
            raise schema.SchemaMismatch(schema.mismatch_sentence(path, found, copy))
    except BaseException:
        con.close()
        raise
    if read_only and has_pending_rollups(con):
        con.close()
        try:
            connect(path).close()
        except duckdb.Error as exc:
            raise RuntimeError(f"{path} holds rollup deltas an ingest left pending (it crashed?), and they "
                               f"could not be folded: {exc}. Open it read-write once, e.g. by restarting "
                               "`slicemeter ingest` on it.") from exc
        con = duckdb.connect(str(path), read_only=True, config=config)
    if not read_only:
        applied = migrate(con)
        if applied and found is not None:
            log.info("migrated %s to slicemeter %s's schema: %s", path, __version__, ", ".join(applied))
    apply_views(con)
    if not read_only and has_pending_rollups(con):
        fold_pending_rollups(con)
    return con
