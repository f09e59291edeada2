"""The reader file: what readers (dashboard, exports, right-sizing) read, refreshed by ingest.

DuckDB allows one writing process per file, so readers never open the live file. Ingest
keeps a second DuckDB file for them holding every table of the store, with the rows of
the tables readers read (hour rollups, catalogs, closed and frozen months, inventory,
strings, offsets, dead letters) and none of the raw samples or minute partials
(sql/ingest/reader_tables.sql). Its size, and so the cost of a refresh, follows the
rollups, not the raw retention.

A refresh pins a read transaction on the live database between two of ingest's own
transactions (right after a fold, so no rollup delta is pending), then copies the tables
into a new file ATTACHed next to PATH from a background thread while ingest goes on
writing (DuckDB's MVCC: the copy sees the pinned state, ingest's commits do not wait for
it). The new file is fsynced and renamed over PATH; rename(2) is atomic, so a reader opens
either the previous state or the new one, each consistent. A refresh that falls due
while the previous one is still copying starts when that one ends.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import duckdb

from slicemeter.store import has_pending_rollups, quote_ident, quote_literal, sql_text

log = logging.getLogger("slicemeter.ingest")

_ALIAS = "slicemeter_reader_next"


def _tmp_path(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.tmp")


def _remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)


def _abandon(cur: duckdb.DuckDBPyConnection, tmp: Path) -> None:
    """Undo a refresh that failed part-way. An ATTACH belongs to the whole database
    instance, not to the cursor, so it is detached explicitly."""
    for stmt in ("ROLLBACK", "DETACH DATABASE IF EXISTS " + _ALIAS):
        try:
            cur.execute(stmt)
        except duckdb.Error:
            pass  # no transaction open / already closed
    cur.close()
    _remove(tmp)


class ReaderFile:
    """Refreshes the reader file at `dest` from the store `con` is connected to."""

    def __init__(self, con: duckdb.DuckDBPyConnection, dest: str | Path):
        self.con = con
        self.dest = Path(dest)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.pin_s = 0.0          # the last refresh's time on the caller's thread
        self.copy_s = 0.0         # ... and in the background, up to the rename

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Begin a refresh; call only between transactions of `con` with no rollup delta
        pending (after a fold). False, nothing begun, while the previous one is running."""
        if self.busy():
            return False
        self._reap()
        started = time.perf_counter()
        tmp = _tmp_path(self.dest)
        _remove(tmp)
        cur = self.con.cursor()
        try:
            cur.execute("BEGIN TRANSACTION")
            # the first read of the live database fixes the state the whole copy sees
            if has_pending_rollups(cur):
                raise RuntimeError("reader file refresh with rollup deltas pending: fold first")
        except BaseException:
            _abandon(cur, tmp)
            raise
        self.pin_s = time.perf_counter() - started
        self._thread = threading.Thread(target=self._copy, args=(cur, tmp, started), name="reader-file", daemon=True)
        self._thread.start()
        return True

    def _copy(self, cur: duckdb.DuckDBPyConnection, tmp: Path, started: float) -> None:
        try:
            cur.execute(f"ATTACH {quote_literal(str(tmp))} AS {_ALIAS}")   # DuckDB 1.5 binds no ATTACH parameter
            source = quote_ident(cur.execute("SELECT current_database()").fetchone()[0])
            for name, with_rows in cur.execute(sql_text("ingest/reader_tables.sql")).fetchall():
                cur.execute(f"CREATE TABLE {_ALIAS}.{quote_ident(name)} AS SELECT * FROM {source}.main.{quote_ident(name)}"
                            + ("" if with_rows else " LIMIT 0"))
            cur.execute("COMMIT")
            cur.execute("DETACH " + _ALIAS)  # checkpoints the new file: no WAL beside it
            cur.close()
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, self.dest)
            self.copy_s = time.perf_counter() - started - self.pin_s
            log.debug("reader file %s refreshed: %.3f s pinned, %.3f s copying", self.dest, self.pin_s, self.copy_s)
        except BaseException as exc:  # noqa: BLE001 - reported by wait() / the next start()
            _abandon(cur, tmp)
            self._error = exc

    def _reap(self) -> None:
        """Report a failed background refresh; ingest goes on, readers keep the last file."""
        error, self._error = self._error, None
        if error is not None:
            log.error("reader file %s: refresh failed, readers keep the previous one: %r", self.dest, error)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def wait(self) -> None:
        """Wait for the running refresh; raise its error."""
        self.join()
        error, self._error = self._error, None
        if error is not None:
            raise RuntimeError(f"reader file {self.dest}: refresh failed: {error!r}") from error

    def refresh(self) -> Path:
        """One whole refresh, returning when PATH holds it."""
        self.wait()
        self.start()
        self.wait()
        return self.dest
