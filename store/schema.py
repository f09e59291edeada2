"""The store's schema version: which migrations of sql/schema a store holds, which
release applied them, and the one transaction that brings it to this release's schema.

A store's schema is this release's when it holds exactly the migrations sql/schema ships.
Ingest and `slicemeter migrate` migrate; every other command refuses a store that holds
fewer (written by an older release) or more (by a newer one, after a downgrade) with
`SchemaMismatch`, one sentence the CLI prints with exit status 2.

All pending migrations, the readers' full-copy mark and the release's record commit in
one transaction (DuckDB's DDL is transactional: CREATE, ALTER and the backfilling
UPDATEs roll back together), so a killed migration leaves the schema it started from.

Memory: DuckDB's ALTER TABLE ADD COLUMN writes the new column of every row into memory
that stays pinned until a checkpoint, which cannot come inside the transaction (measured:
216 MB for 25 columns added to 3.2 M raw rows, where ingest's limit is 160 MB). So on a
table of more than REWRITE_ROWS rows the runner applies a migration's ADD COLUMNs to an
empty copy of the table (its CREATE statement, keys included) and moves the rows over with
INSERT ... BY NAME (new columns take their defaults, as ALTER gives them): a bulk insert
that DuckDB writes to the file as it goes (the same 3.2 M rows within 60 MB, 5.5 s). The
checkpoint after the commit writes what remains in the WAL into the file, so a smaller
memory limit can be set after it.
"""
from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb

from slicemeter import __version__
from slicemeter.common import SchemaMismatch

log = logging.getLogger("slicemeter.store")

RUNNER_SQL = "schema/migrations.sql"
UNRECORDED = "unrecorded"
# A test hook: where `SLICEMETER_MIGRATE_PAUSE` names a point of migrate() (`before:NAME`
# of a migration file, `rewritten:TABLE` once a large table's rows are in its copy,
# `commit`, `checkpoint`), the migration logs "migrate paused at POINT" and waits there
# for good, so a test can kill it at that exact point.
PAUSE_ENV = "SLICEMETER_MIGRATE_PAUSE"
REWRITE_ROWS = 100_000
_ADD_COLUMN = re.compile(r"^\s*ALTER\s+TABLE\s+(\w+)\s+ADD\s+COLUMN\s", re.IGNORECASE)


@dataclass
class SchemaState:
    """What a store holds against what this release ships."""
    applied: list[str]                 # migrations the store holds, in order
    pending: list[str]                 # shipped, not applied (an older store)
    unknown: list[str]                 # applied, not shipped (a newer release wrote it)
    releases: list[tuple] = field(default_factory=list)   # (release, applied, holds, migrated_at)

    @property
    def current(self) -> bool:
        return not self.pending and not self.unknown


def shipped() -> list[Path]:
    from slicemeter.store import _numbered

    return _numbered("schema")


def _table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database() "
                            "AND schema_name = 'main' AND table_name = ?", [name]).fetchone()[0])


def state(con: duckdb.DuckDBPyConnection) -> SchemaState | None:
    """The store's schema state; None for a database that holds no store (every release
    has created schema_migrations first: a new file, or another program's database)."""
    names = [p.name for p in shipped()]
    if not _table_exists(con, "schema_migrations"):
        return None
    applied = [row[0] for row in con.execute("SELECT name FROM schema_migrations ORDER BY name").fetchall()]
    releases = []
    if _table_exists(con, "schema_releases"):
        releases = con.execute("SELECT release, applied, holds, migrated_at FROM schema_releases "
                               "ORDER BY migrated_at, release").fetchall()
    return SchemaState(applied=applied, pending=[n for n in names if n not in set(applied)],
                       unknown=[n for n in applied if n not in set(names)] + newer_releases(releases),
                       releases=releases)


def _version_key(release: str) -> tuple[int, ...] | None:
    try:
        return tuple(int(part) for part in release.split("."))
    except ValueError:
        return None


def newer_releases(releases: list[tuple]) -> list[str]:
    """The releases after this one that migrated a store (a downgrade's tell)."""
    ours = _version_key(__version__)
    return [f"slicemeter {row[0]}" for row in releases if (_version_key(row[0]) or ()) > ours]


def _last_release(found: SchemaState) -> str:
    if not found.releases or found.releases[-1][0] == UNRECORDED:
        return f"a release before {__version__}" if not found.unknown else "a newer release"
    return f"slicemeter {found.releases[-1][0]}"


def is_readers_copy(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the database is a copy of a store (the readers' file), not ingest's own."""
    from slicemeter.store import sql_text

    return not con.execute(sql_text("chargeback/ingest_store.sql")).fetchone()[0]


def mismatch_sentence(target, found: SchemaState, copy: bool = False) -> str:
    """One sentence: what the store holds, what this release needs, the command that fixes it.
    `copy`: the database is a readers' file, which only its ingest rebuilds."""
    total = len(shipped())
    if copy:
        return (f"{target} is a readers' file holding {len(found.applied)} schema migrations where slicemeter "
                f"{__version__} needs its own {total}: it is being upgraded, and this release's ingest rebuilds "
                "it at its first refresh (start it with --snapshot naming this file; the store itself "
                "migrates at ingest's start or with `slicemeter migrate --db STORE`).")
    if found.unknown:
        return (f"{target} was migrated by a newer release than slicemeter {__version__} "
                f"({', '.join(found.unknown)}), which needs exactly its own {total} schema migrations: run the "
                "release that wrote the store, or restore a backup taken before the upgrade "
                "(docs/operations.md, Upgrades).")
    return (f"{target} holds {total - len(found.pending)} of the {total} schema migrations slicemeter "
            f"{__version__} needs, last migrated by {_last_release(found)}: run "
            f"`slicemeter migrate --db {target}` (or start this release's ingest on it, which migrates).")


def check(con: duckdb.DuckDBPyConnection, target) -> None:
    """SchemaMismatch unless the store's schema is this release's (a database with no store
    in it passes: its own command says what it lacks)."""
    found = state(con)
    if found is not None and not found.current:
        raise SchemaMismatch(mismatch_sentence(target, found, not found.unknown and is_readers_copy(con)))


def check_file(path: Path) -> bool:
    """For a server about to start on `path` (the dashboard): SchemaMismatch where it is a
    store whose schema is not this release's; True where it is a readers' file still of an
    older schema (its ingest rebuilds it: the server shows "being upgraded" meanwhile). A
    file another process holds for writing is checked by each connection instead."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        return False
    try:
        found = state(con)
        if found is None or found.current:
            return False
        copy = is_readers_copy(con)
        if not copy or found.unknown:
            raise SchemaMismatch(mismatch_sentence(path, found, copy and not found.unknown))
        return True
    finally:
        con.close()


def _pause(point: str) -> None:
    if os.environ.get(PAUSE_ENV) == point:
        log.warning("migrate paused at %s", point)
        for handler in logging.getLogger().handlers:
            handler.flush()
        threading.Event().wait()


class _Rewrites:
    """A migration's ADD COLUMNs on large tables, applied to empty copies whose rows are
    moved over before any other statement runs (see the module's Memory)."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con = con
        self.open: dict[str, str] = {}    # table -> its empty copy

    def _large(self, table: str) -> bool:
        from slicemeter.store import quote_ident

        if not _table_exists(self.con, table):
            return False
        indexed = self.con.execute("SELECT count(*) FROM duckdb_indexes() WHERE database_name = current_database() "
                                   "AND table_name = ?", [table]).fetchone()[0]
        rows = self.con.execute(f"SELECT count(*) FROM {quote_ident(table)}").fetchone()[0]
        return not indexed and rows > REWRITE_ROWS

    def statement(self, text: str) -> None:
        from slicemeter.store import quote_ident

        match = _ADD_COLUMN.match(text)
        table = match.group(1) if match else None
        if table is None or (table not in self.open and not self._large(table)):
            self.flush()
            self.con.execute(text)
            return
        if table not in self.open:
            copy = f"{table}__migrating"
            create = self.con.execute("SELECT sql FROM duckdb_tables() WHERE database_name = current_database() "
                                      "AND schema_name = 'main' AND table_name = ?", [table]).fetchone()[0]
            name = re.escape(quote_ident(table)) + "|" + re.escape(table) + r"\b"
            head = re.match(r"CREATE TABLE\s+(?:main\.)?(?:" + name + ")", create)
            self.con.execute(f"CREATE TABLE {quote_ident(copy)}" + create[head.end():])
            self.open[table] = copy
        self.con.execute(quote_ident(self.open[table]).join(text.split(match.group(1), 1)))

    def flush(self) -> None:
        from slicemeter.store import quote_ident

        for table, copy in self.open.items():
            started = time.monotonic()
            rows = self.con.execute(f"INSERT INTO {quote_ident(copy)} BY NAME SELECT * FROM {quote_ident(table)}"
                                    ).fetchone()[0]
            _pause(f"rewritten:{table}")
            self.con.execute(f"DROP TABLE {quote_ident(table)}")
            self.con.execute(f"ALTER TABLE {quote_ident(copy)} RENAME TO {quote_ident(table)}")
            log.info("migrate: %s rewritten with its new columns (%d rows, %.1f s)", table, rows,
                     time.monotonic() - started)
        self.open.clear()


def _apply(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    from slicemeter.store.script import statements

    rewrites = _Rewrites(con)
    for text in statements(path.read_text()):
        rewrites.statement(text)
    rewrites.flush()


def migrate(con: duckdb.DuckDBPyConnection, progress=None) -> list[str]:
    """Apply the pending migrations in one transaction, record the release that applied
    them, then checkpoint; returns the names applied. `progress(done, total, name,
    seconds)` hears of each migration as it ends (before the commit)."""
    from slicemeter.store import sql_text, transaction
    from slicemeter.store.script import execute_text

    fresh_bookkeeping = not _table_exists(con, "schema_releases")
    with transaction(con):
        execute_text(con, sql_text(RUNNER_SQL), {})
        done = {row[0] for row in con.execute("SELECT name FROM schema_migrations").fetchall()}
        pending = [p for p in shipped() if p.name not in done]
        if fresh_bookkeeping and done:
            # applied by a release before the record: one row for them all
            con.execute("INSERT INTO schema_releases (release, applied, holds, migrated_at) "
                        "SELECT ?, list(name ORDER BY name), count(*), max(applied_at) FROM schema_migrations",
                        [UNRECORDED])
        for number, path in enumerate(pending, 1):
            _pause(f"before:{path.name}")
            started = time.monotonic()
            _apply(con, path)
            con.execute("INSERT INTO schema_migrations (name) VALUES (?)", [path.name])
            if progress:
                progress(number, len(pending), path.name, time.monotonic() - started)
        if pending:
            # reader_changes exists by now (080_reader_changes.sql): a NULL hour makes the
            # next refresh copy the readers' files whole, since a migration may change any table
            con.execute("INSERT INTO reader_changes (hour) VALUES (NULL)")
            con.execute("INSERT INTO schema_releases (release, applied, holds) "
                        "SELECT ?, ?, count(*) FROM schema_migrations", [__version__, [p.name for p in pending]])
        _pause("commit")
    if pending:
        _pause("checkpoint")
        con.execute("CHECKPOINT")
    return [p.name for p in pending]


def describe(target, found: SchemaState | None) -> list[str]:
    """`slicemeter migrate --status`: the schema held, the releases that migrated it, what is pending."""
    total = len(shipped())
    if found is None:
        return [f"{target}: no store yet (ingest or `slicemeter migrate` creates one)"]
    verdict = ("this release's schema" if found.current
               else "newer than this release's" if found.unknown else "older than this release's")
    lines = [f"{target}: {len(found.applied)} schema migration(s) held, slicemeter {__version__} ships {total}: "
             f"{verdict}"]
    for release, applied, holds, at in found.releases:
        when = at.strftime("%Y-%m-%d %H:%M:%S") if isinstance(at, datetime) else str(at)
        who = "a release before the record (unrecorded)" if release == UNRECORDED else f"slicemeter {release}"
        lines.append(f"  {when}  {who}: applied {len(applied)}, held {holds}")
    lines += [f"  pending: {name}" for name in found.pending]
    lines += [f"  unknown to this release: {name}" for name in found.unknown]
    return lines
