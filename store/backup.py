"""A consistent copy of a store file while ingest writes to it.

DuckDB lets one process write a file and no other process open it meanwhile, so the copy
is taken by whichever process holds the store: `slicemeter backup` itself when no ingest
runs, else the running ingest, on request. The request is a file beside the store,
STORE.backup-request, naming the copy to write; ingest looks for it about once a second
and answers in COPY.result ("ok" and the copy's offsets, or the error).

The copy is one statement, COPY FROM DATABASE, in one read transaction on a cursor of the
store's own database: it sees one committed state (the raw samples, the rollups and their
pending deltas, and the Kafka offsets they count up to, which ingest commits together),
while ingest goes on committing beside it (DuckDB's MVCC). It is written under a temporary
name, synced and renamed, so the copy's name holds a whole store or nothing. Restored, it
is a store like the original at that instant: ingest replays the topic from its offsets
(docs/operations.md, Backup and restore).
"""
from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import duckdb

from slicemeter.common import fsync_path
from slicemeter.store import quote_ident, quote_literal

log = logging.getLogger("slicemeter.store")

_ALIAS = "slicemeter_backup"


def request_path(store: Path) -> Path:
    return Path(str(store) + ".backup-request")


def result_path(copy: Path) -> Path:
    return Path(str(copy) + ".result")


def copy_store(con: duckdb.DuckDBPyConnection, target: Path, source: str | None = None) -> list[tuple[str, int, int]]:
    """Write the store `source` (default: the database file `con` opened) to the new file
    `target`, consistently; returns the copy's Kafka offsets (topic, partition, next offset)."""
    target = Path(target)
    tmp = target.with_name(f".{target.name}.tmp")
    for stale in (tmp, Path(str(tmp) + ".wal")):
        stale.unlink(missing_ok=True)
    cur = con.cursor()
    try:
        source = source or cur.execute("SELECT current_database()").fetchone()[0]
        cur.execute(f"ATTACH {quote_literal(str(tmp))} AS {_ALIAS}")
        try:
            cur.execute("BEGIN TRANSACTION")
            cur.execute(f"COPY FROM DATABASE {quote_ident(source)} TO {_ALIAS}")
            offsets = cur.execute(f'SELECT topic, "partition", next_offset FROM {_ALIAS}.main.ingest_offsets '
                                  'ORDER BY topic, "partition"').fetchall()
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        finally:
            cur.execute(f"DETACH {_ALIAS}")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        cur.close()
    fsync_path(tmp)
    os.replace(tmp, target)
    fsync_path(target.parent)
    return offsets


def copy_file(store: Path, target: Path) -> list[tuple[str, int, int]]:
    """copy_store for a store file no process writes: attached read-only to a database of
    this process's own."""
    from slicemeter.store import schema

    con = duckdb.connect()
    try:
        con.execute(f"ATTACH {quote_literal(str(store))} AS slicemeter_source (READ_ONLY)")
        con.execute("USE slicemeter_source")
        schema.check(con, store)
        return copy_store(con, target, "slicemeter_source")
    finally:
        con.close()


def write_result(copy: Path, offsets=None, error: str | None = None) -> None:
    """COPY.result, written whole (a temporary name renamed): what the waiting command reads."""
    body = {"error": error} if error else {"ok": str(copy), "offsets": [list(o) for o in offsets]}
    path = result_path(copy)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


class BackupServer:
    """Ingest's side: a request found beside the store is served on a thread of its own."""

    def __init__(self, con: duckdb.DuckDBPyConnection, store: Path):
        self.con, self.request = con, request_path(store)
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        if (self._thread and self._thread.is_alive()) or not self.request.is_file():
            return
        try:
            copy = Path(self.request.read_text().strip())
            self.request.unlink()
        except OSError:
            return   # written as we looked: the next look takes it
        self._thread = threading.Thread(target=self._serve, args=(copy,), name="backup", daemon=True)
        self._thread.start()

    def _serve(self, copy: Path) -> None:
        log.info("backup: copying the store to %s", copy)
        try:
            offsets = copy_store(self.con, copy)
        except Exception as exc:   # noqa: BLE001 - the requester is told; ingest goes on
            log.error("backup to %s failed: %s", copy, exc)
            write_result(copy, error=str(exc))
            return
        log.info("backup: %s written (offsets %s)", copy, offsets)
        write_result(copy, offsets)

    def join(self) -> None:
        if self._thread:
            self._thread.join()
