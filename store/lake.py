"""A DuckLake store: one lake that several ingest workers of a consumer group write and any
number of readers attach, catalog in PostgreSQL, data as Parquet files in a folder (a shared
filesystem or an object store path DuckDB can write).

A lake is named like DuckDB's ATTACH names it, `ducklake:postgres:<libpq conninfo or URI>`,
and is accepted wherever a DuckDB file is (`--db`): `store.connect` comes here for it.

Extensions load from the PyPI wheels (`duckdb-extension-ducklake`, `-postgres`), by file
path, never downloaded: they are built for one DuckDB version, the one pyproject pins.

Why every write appends: DuckLake fails a commit where a concurrent one deleted from or
altered a table it inserted into (and the other way round), while appends to one table by
several transactions always commit (docs/upstream.md, DuckLake). So a worker's batch
appends its raw rows, hour-rollup deltas, inventory rows, new string ids and offsets in one
lake transaction, and the views of sql/lake/views.sql merge them on read: offsets are the
latest row per partition, strings are distinct, rollups are the deltas merged.
"""
from __future__ import annotations

import atexit
import functools
import logging
import importlib.util
import shutil
import tempfile
import time
from pathlib import Path

import duckdb

from slicemeter.common import LAKE_PREFIX as PREFIX
from slicemeter.store import migrate, quote_ident, quote_literal, sql_text

ALIAS = "lake"            # the lake's name in every connection (sql/lake/*.sql use it)
_WHEELS = {"ducklake": "duckdb_extension_ducklake", "postgres_scanner": "duckdb_extension_postgres"}
# commit retries: DuckLake retries a commit that lost the race for the next snapshot id
# (appends never conflict otherwise); two busy workers need more than the default 10
_MAX_RETRIES = 50


log = logging.getLogger("slicemeter.store")


def _migrate_progress(done: int, total: int, what: str, seconds: float) -> None:
    log.info("migrate: %d/%d %s", done, total, what)


def _mismatch_sentence(found) -> str:
    """Like store/schema.py's, without the lake's name: it may hold a password."""
    from slicemeter import __version__

    if found.unknown:
        return (f"The lake was migrated by a newer release than slicemeter {__version__} "
                f"({', '.join(found.unknown)}): run that release, or restore a backup taken before the upgrade "
                "(docs/operations.md, Upgrades).")
    return (f"The lake lacks {len(found.pending)} table(s) or column(s) slicemeter {__version__} needs "
            f"({', '.join(found.pending[:5])}), from an older release: run `slicemeter migrate --db` naming "
            "the lake (or start this release's ingest on it, which migrates).")


class LakeError(RuntimeError):
    pass


def _check_target(target: str) -> str:
    """The ATTACH string, validated: ATTACH takes no parameters, so the name is quoted here."""
    if not target.startswith(PREFIX + "postgres:"):
        raise LakeError(f"a lake is named ducklake:postgres:<conninfo>, got {target!r}")
    if any(ord(ch) < 32 for ch in target):
        raise LakeError("the lake's name holds a control character")
    return target


_ext_dir: Path | None = None


def extension_files() -> list[Path]:
    """The extension binaries of the installed wheels, named as DuckDB loads them (an
    extension's entry point is named after its file: the postgres wheel's file is
    `postgres.duckdb_extension`, its entry point `postgres_scanner`)."""
    global _ext_dir
    version = duckdb.__version__
    files = []
    for name, module in _WHEELS.items():
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations:
            raise LakeError(f"{module.replace('_', '-')} is not installed (pip install 'slicemeter[lake]')")
        folder = Path(list(spec.submodule_search_locations)[0]) / "extensions" / f"v{version}"
        found = sorted(folder.glob("*.duckdb_extension"))
        if not found:
            raise LakeError(f"{module.replace('_', '-')} has no extension for DuckDB {version} in {folder}")
        if found[0].name == f"{name}.duckdb_extension":
            files.append(found[0])
            continue
        if _ext_dir is None:    # private to this process: nobody else can swap the file
            _ext_dir = Path(tempfile.mkdtemp(prefix="slicemeter-duckdb-ext-"))
            atexit.register(shutil.rmtree, _ext_dir, True)
        link = _ext_dir / f"{name}.duckdb_extension"
        if not link.exists():
            link.symlink_to(found[0])
        files.append(link)
    return files


def load_extensions(con: duckdb.DuckDBPyConnection) -> None:
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    for path in extension_files():
        con.execute(f"LOAD {quote_literal(str(path))}")


@functools.cache   # the release's schema: every connection's check and migration reads it
def _lake_columns() -> dict[str, list[tuple[str, str]]]:
    """The store's tables (sql/schema, applied to an empty in-memory database), as the lake
    holds them: no keys or defaults (DuckLake has none), string ids 64-bit (hashes of the
    value: ingest/strings.py HashedStringIds)."""
    local = duckdb.connect()
    try:
        migrate(local)
        rows = local.execute(
            "SELECT table_name, column_name, data_type, column_name = 'id' AND table_name = 'ingest_strings' "
            "OR column_name LIKE '%\\_id' ESCAPE '\\' AND data_type = 'INTEGER' "
            "FROM duckdb_columns() WHERE database_name = 'memory' AND schema_name = 'main' "
            "AND table_name <> 'schema_migrations' ORDER BY table_name, column_index").fetchall()
    finally:
        local.close()
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, column, type_, string_id in rows:
        tables.setdefault(table, []).append((column, "BIGINT" if string_id else type_))
    return tables


# rows a table is created with, in the same commit (two workers creating one table conflict,
# so exactly one seed is stored): the fence row every partition take-over deletes
# (sql/lake/take_partitions.sql)
_SEED_ROWS = {"ingest_partition_owners": [
    f"INSERT INTO {ALIAS}.main.ingest_partition_owners VALUES ('', -1, 0, '', TIMESTAMP '1970-01-01')"]}


def _schema_ddl(con: duckdb.DuckDBPyConnection) -> tuple[list[str], list[str]]:
    """What the lake lacks of this release's tables and columns: (DDL, what each adds)."""
    have: dict[str, set[str]] = {}
    for table, column in con.execute(
            "SELECT table_name, column_name FROM duckdb_columns() WHERE database_name = ? AND schema_name = 'main'",
            [ALIAS]).fetchall():
        have.setdefault(table, set()).add(column)
    ddl, adds = [], []
    wanted = _lake_columns()
    for table, columns in wanted.items():
        if table not in have:
            ddl.append(f"CREATE TABLE {ALIAS}.main.{quote_ident(table)} ("
                       + ", ".join(f"{quote_ident(c)} {t}" for c, t in columns) + ")")
            adds.append(f"table {table}")
            for seed_row in _SEED_ROWS.get(table, []):
                ddl.append(seed_row)
                adds.append(f"the first row of {table}")
        else:
            for c, t in columns:
                if c not in have[table]:
                    ddl.append(f"ALTER TABLE {ALIAS}.main.{quote_ident(table)} ADD COLUMN {quote_ident(c)} {t}")
                    adds.append(f"column {table}.{c}")
    return ddl, adds


def schema_state(con: duckdb.DuckDBPyConnection):
    """The lake's schema against this release's (store/schema.py SchemaState): pending are
    the tables and columns it lacks, unknown the newer releases that migrated it (a lake
    keeps tables of its own beside the store's, so its tables alone cannot tell)."""
    from slicemeter.store.schema import SchemaState, newer_releases

    _, adds = _schema_ddl(con)
    releases = []
    if con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = 'schema_releases'",
                   [ALIAS]).fetchone()[0]:
        releases = con.execute(f"SELECT release, applied, holds, migrated_at FROM {ALIAS}.main.schema_releases "
                               "ORDER BY migrated_at").fetchall()
    held = len(_lake_columns()) - sum(a.startswith("table ") for a in adds)
    return SchemaState(applied=[f"{held} tables"], pending=adds, unknown=newer_releases(releases), releases=releases)


def ensure_schema(con: duckdb.DuckDBPyConnection, progress=None) -> list[str]:
    """Create the lake's tables, and add columns later migrations brought, in one lake
    transaction with the release's record (schema_releases); a worker that lost the race
    to another reads what that one created. Returns what it added."""
    from slicemeter import __version__

    for attempt in range(5):
        ddl, adds = _schema_ddl(con)
        if not ddl:
            return []
        try:
            con.execute("BEGIN TRANSACTION")
            for number, statement in enumerate(ddl, 1):
                con.execute(statement)
                if progress:
                    progress(number, len(ddl), adds[number - 1], 0.0)
            con.execute(f"INSERT INTO {ALIAS}.main.schema_releases (release, applied, holds, migrated_at) "
                        f"SELECT ?, ?, count(*), now() FROM duckdb_tables() WHERE database_name = ?",
                        [__version__, adds, ALIAS])
            con.execute("COMMIT")
            return adds
        except duckdb.Error:
            try:
                con.execute("ROLLBACK")
            except duckdb.TransactionException:
                pass   # a failed COMMIT (lost the race) has ended the transaction already
            if attempt == 4:
                raise
    return []


def migrate_command(target: str, status: bool) -> int:
    """`slicemeter migrate --db ducklake:...`: the lake's tables and columns brought to this
    release's in one lake transaction, or shown (--status)."""
    from slicemeter.store import schema

    con = connect(target, read_only=status, upgrade=not status, check=False)
    try:
        found = schema_state(con)
        if status:
            print("\n".join(schema.describe("the lake", found)))
            return 0 if found.current else 1
        print("migrated the lake: it holds slicemeter's tables and columns")
    finally:
        con.close()
    return 0


def is_lake_connection(con: duckdb.DuckDBPyConnection) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = ? AND type = 'ducklake'",
                            [ALIAS]).fetchone()[0])


def apply_lake_views(con: duckdb.DuckDBPyConnection) -> None:
    """The lake's views over the store's views (store.apply_views calls this last)."""
    con.execute(sql_text("lake/views.sql"))


def _attach(con: duckdb.DuckDBPyConnection, statement: str, attempts: int = 5) -> None:
    """ATTACH; workers that start together on a new lake race to create its catalog
    tables in PostgreSQL, and the losers find them on a later attempt."""
    for attempt in range(1, attempts + 1):
        try:
            con.execute(statement)
            return
        except duckdb.Error as exc:
            if "Failed to initialize DuckLake" not in str(exc) or attempt == attempts:
                raise
            time.sleep(0.2 * attempt)


def connect(target: str, read_only: bool = False, data_path: str | Path | None = None, upgrade: bool = True,
            check: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB (TEMP views, batch tables) with the lake attached as `lake` and
    made the default, so the store's SQL reads and appends the lake's tables.

    `data_path`: where Parquet files go, needed when the lake is created (a lake keeps it
    in its catalog). `upgrade` (ingest, `slicemeter migrate`; a new lake is always created):
    a read-write connection creates the lake's tables and columns where missing; otherwise
    a lake whose schema is not this release's raises SchemaMismatch (unless not `check`).
    Read-only ones hold one snapshot (a transaction) until closed."""
    from slicemeter.common import SchemaMismatch
    from slicemeter.store import apply_views, register_functions

    target = _check_target(str(target))
    con = duckdb.connect()
    try:
        con.execute("SET enable_progress_bar = false")   # lake reads can be slow: no bars on stdout
        load_extensions(con)
        options = []
        if data_path is not None:
            Path(data_path).mkdir(parents=True, exist_ok=True)
            options.append(f"DATA_PATH {quote_literal(str(Path(data_path).resolve()))}")
        if read_only:
            options.append("READ_ONLY")
        suffix = f" ({', '.join(options)})" if options else ""
        _attach(con, f"ATTACH {quote_literal(target)} AS {ALIAS}{suffix}")
        con.execute(f"USE {ALIAS}")
        con.execute(f"SET GLOBAL ducklake_max_retry_count = {_MAX_RETRIES}")
        new = not con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = ?", [ALIAS]).fetchone()[0]
        if not read_only and (upgrade or new):
            added = ensure_schema(con, _migrate_progress if upgrade and not new else None)
            if added and not new:
                log.info("migrated the lake: %d table(s) or column(s) added", len(added))
        elif check:
            from slicemeter.store import schema

            found = schema_state(con)
            if not found.current:
                raise SchemaMismatch(_mismatch_sentence(found))
        if not check:
            return con
        register_functions(con)
        apply_views(con)
        if read_only:
            # a reader sees one committed snapshot for as long as it is connected, as a
            # reader file would be: an export's many queries then agree with each other
            con.execute("BEGIN TRANSACTION")
    except BaseException:
        con.close()
        raise
    return con


def refresh(con: duckdb.DuckDBPyConnection) -> None:
    """Move a read-only connection on to the lake's latest snapshot."""
    con.execute("COMMIT")
    con.execute("BEGIN TRANSACTION")
