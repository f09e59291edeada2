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
(read-write or read-only), so views always match the code reading them. On a store file the
macros are kept in the file (DuckDB binds each as it is created, a millisecond or two apiece,
which every connection paid), stamped with the digest of the text that made them: a
read-write connection that finds another stamp makes them again, a read-only one makes TEMP
ones in their place. TEMP objects are found first, so a tenant's scope (sql/scope/tenant.sql)
and a readers' file's day figures (sql/views/reader_days.sql) shadow them as they shadow tables.
Numbering: 001-099 ingest, 100-199 chargeback and exports, 200-299 recommend,
300-399 dashboard.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.resources
import logging
import re
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
    cursors share them), on a new connection (not in a transaction, which a refusal would
    end): slicemeter_cluster_key is slicemeter.common.cluster_key, so a cluster identity has
    one canonical form in Python and in SQL."""
    try:   # listing duckdb_functions() to look first costs ten times the refusal
        con.create_function("slicemeter_cluster_key", cluster_key, ["VARCHAR"], "VARCHAR", side_effects=False)
    except duckdb.CatalogException as exc:
        if "already exists" not in str(exc):   # another connection to the database registered it
            raise


_MACRO_LINE = re.compile(r"^CREATE OR REPLACE TEMP MACRO ", re.MULTILINE)   # a line of code, not of a comment
_DIGEST_VIEW = "slicemeter_views_"   # + the digest of the text the kept macros were made from


@functools.cache
def _view_statements() -> tuple[tuple[tuple[bool, str], ...], str]:
    """sql/views/NNN_name.sql as (is a macro, statement), in order, and the text's digest."""
    text = "\n".join(path.read_text() for path in _numbered("views"))
    statements = tuple((bool(_MACRO_LINE.search(query)), query)
                       for query in (st.query for st in duckdb.extract_statements(text)))
    return statements, hashlib.sha256(text.encode()).hexdigest()[:16]


def _kept_digests(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The views the store file's kept macros are stamped with (none: none kept). A failed
    look-up would end the transaction a cursor may be in, so the stamp is a view, listed."""
    return [name for (name,) in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND starts_with(view_name, ?)", [_DIGEST_VIEW]).fetchall()]


def _keep_macros(con: duckdb.DuckDBPyConnection, statements, stamp: str, earlier: list[str]) -> bool:
    """Make the views' macros in the store file (the views TEMP, in their order among them),
    stamped with the view `stamp`; first drop those an `earlier` stamp's text made. False
    where another transaction of this process changed them meanwhile (a write conflict)."""
    try:
        with transaction(con):
            for name, kind in con.execute(
                    "SELECT DISTINCT function_name, function_type FROM duckdb_functions() WHERE database_name = "
                    "current_database() AND schema_name = 'main' AND NOT internal AND function_type IN "
                    "('macro', 'table_macro')").fetchall() if earlier else ():
                con.execute(f"DROP MACRO {'TABLE ' if kind == 'table_macro' else ''}{quote_ident(name)}")
            for name in earlier:
                con.execute(f"DROP VIEW {quote_ident(name)}")
            for is_macro, query in statements:
                con.execute(_MACRO_LINE.sub("CREATE OR REPLACE MACRO ", query, count=1) if is_macro else query)
            con.execute(f"CREATE VIEW {quote_ident(stamp)} AS SELECT 1 AS kept")
    except duckdb.TransactionException:
        return False
    return True


def apply_views(con: duckdb.DuckDBPyConnection) -> None:
    """The views and macros, on every connection (its functions registered: connect does
    that); on a connection (or cursor) with a lake attached, over the lake's tables, then
    the lake's own views (store/lake.py)."""
    from slicemeter.store import lake

    on_lake = lake.is_lake_connection(con)
    if not on_lake:
        statements, digest = _view_statements()
        kept = _kept_digests(con)
        if kept == [_DIGEST_VIEW + digest]:
            for is_macro, query in statements:
                if not is_macro:
                    con.execute(query)
        elif (con.execute("SELECT current_setting('access_mode')").fetchone()[0] == "read_only"
              or not _keep_macros(con, statements, _DIGEST_VIEW + digest, kept)):
            for _, query in statements:   # this connection's own TEMP macros
                con.execute(query)
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
    register_functions(con)
    apply_views(con)
    if not read_only and has_pending_rollups(con):
        fold_pending_rollups(con)
    return con
