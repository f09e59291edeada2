"""The reader file: what readers (dashboard, exports, right-sizing) read, refreshed by ingest.

DuckDB allows one writing process per file, so readers never open the live file. Ingest
keeps a second DuckDB file for them holding every table of the store, with the rows of
the tables readers read (hour rollups, catalogs, closed and frozen months, inventory,
strings, offsets, dead letters) and none of the raw samples, minute partials or instants
(sql/ingest/reader_tables.sql). Its size follows the rollups, not the raw retention.

PATH is a symlink to one of two data files beside it, PATH.a and PATH.b. Readers open PATH
as a file; a refresh brings the other data file (the one readers were not sent to last
time, two refreshes old) up to date and then points PATH at it: the new link is made under
a temporary name and renamed over PATH, and rename(2) is atomic, so a reader opens either
the previous state or the new one, each whole and consistent. stat(PATH) follows the link:
a switch changes the inode, size or mtime the dashboard keys its cache on.

A refresh pins a read transaction on the live database between two of ingest's own
transactions (right after a fold, so no rollup delta is pending), then writes the data
file from a background thread while ingest goes on writing (DuckDB's MVCC: the refresh
sees the pinned state, ingest's commits do not wait for it). It copies only what changed
since that file's state: every writer of an hour-keyed table names the hours it changed in
the live store's reader_changes, in its own transaction (sql/schema/080_reader_changes.sql).
Just before the pin, a small transaction stamps the log rows not yet stamped with this
refresh's number; a file that holds refresh F then needs the hours of the rows stamped
after F or not stamped in the pinned state (a row stamped at or before F was committed
before F's pin). Those hours are replaced in the hour-keyed tables, every other table is
replaced whole (they are small), and the file records the refresh it now holds. So a
refresh costs about the rows an interval changed, whatever the fleet and the months held.

The file also keeps day figures (sql/schema/090_reader_days.sql: per GPU-day, slice-day and
cluster-hour, the kept money per slice-day and GPU-day, the health events) that the month's
pages and invoice read instead of every hour: a refresh recomputes the days of the hours it
copied from the pinned store (sql/views/305_day_figures.sql; the health events from the
first of those days on), and every day on a whole copy. They are not in the row-count check
(the store keeps none).

Where the log cannot say, the refresh copies everything into a new file and renames it
over the data file: the first refresh (or a plain file at PATH from before, which the link
then replaces), a file of another store, a log pruned past the file's state, a migration
or an emptied table (a NULL hour), a schema that differs. Before the file is published,
every table's row count must equal the pinned state's (count(*) is free in DuckDB); if one
differs the file is rewritten whole within the same pinned transaction.

Readers holding the data file a refresh is due to write: DuckDB locks a file (fcntl, shared
for a read-only open, exclusive for read-write), so another process's reader makes the
ATTACH fail; the refresh then copies everything into a new file renamed over that name,
and the reader keeps reading the old one until it closes it. fcntl locks do not tell the
connections of one process apart, so ingest's own readers (ingest/headlines.py) open the
file through `reading(PATH)`, which yields the data file to open and keeps this process's
refreshes from writing it until the block ends (the refresh waits for them).

A refresh that falls due while the previous one is still running starts when that one ends.
"""
from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import Counter
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Iterator

import duckdb

from slicemeter.common import fsync_path
from slicemeter.store import (READER_DAY_FIGURES, apply_views, has_pending_rollups, quote_ident, quote_literal,
                              reader_tables, sql_text, transaction)

log = logging.getLogger("slicemeter.ingest")

_ALIAS = "slicemeter_reader_next"   # named in sql/ingest/reader_ecc_before.sql too
_STATE = "reader_file_state"   # in a data file: the store it is of and the refresh it holds
_SLOTS = ("a", "b")
_HOUR = timedelta(hours=1)
_DAY = timedelta(days=1)
_ONWARD = ("reader_health_event", "reader_health_event_slice")   # recomputed from the first day changed on
_DAYS_PER_STATEMENT = 7        # whole-file day figures: a week of hours per statement bounds the join's memory
_MAX_RANGES = 16               # beyond, the changed hours are matched as a set, not range by range


def _tmp_path(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.tmp")


def _link_tmp_path(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}.link")


def data_files(dest: Path) -> tuple[Path, Path]:
    """The two data files PATH links to in turn."""
    return tuple(dest.with_name(f"{dest.name}.{s}") for s in _SLOTS)


def _linked(dest: Path) -> Path | None:
    """The data file PATH links to; None for a plain file, nothing, or a link elsewhere."""
    try:
        target = os.readlink(dest)
    except OSError:
        return None
    return next((f for f in data_files(dest) if f.name == target), None)


def _remove(path: Path) -> None:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)


class _Readers:
    """This process's readers of one PATH: how many hold each data file."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.held: Counter[str] = Counter()


_readers: dict[str, _Readers] = {}
_readers_lock = threading.Lock()


def _readers_of(dest: Path) -> _Readers:
    with _readers_lock:
        return _readers.setdefault(os.path.abspath(dest), _Readers())


@contextlib.contextmanager
def reading(path: str | Path) -> Iterator[Path]:
    """The file behind the readers' PATH, for a reader in ingest's own process to open
    read-only: this process's refreshes do not write it until the block ends. (Another
    process's reader is kept safe by DuckDB's file lock.)"""
    readers = _readers_of(Path(path))
    with readers.cond:
        target = os.path.realpath(path)
        readers.held[target] += 1
    try:
        yield Path(target)
    finally:
        with readers.cond:
            readers.held[target] -= 1
            if not readers.held[target]:
                del readers.held[target]
            readers.cond.notify_all()


def _abandon(cur: duckdb.DuckDBPyConnection, tmp: Path | None) -> None:
    """Undo a refresh that failed part-way. An ATTACH belongs to the whole database
    instance, not to the cursor, so it is detached explicitly."""
    for stmt in ("ROLLBACK", "DETACH DATABASE IF EXISTS " + _ALIAS):
        try:
            cur.execute(stmt)
        except duckdb.Error:
            pass  # no transaction open / already closed
    cur.close()
    if tmp is not None:
        _remove(tmp)


def _has_change_log(cur: duckdb.DuckDBPyConnection) -> bool:
    return cur.execute("SELECT count(*) = 2 FROM duckdb_tables() WHERE database_name = current_database() "
                       "AND schema_name = 'main' AND table_name IN ('reader_changes', 'reader_state')").fetchone()[0]


def _hour_ranges(hours: list[datetime]) -> list[tuple[datetime, datetime]]:
    """Sorted hours as [start, end) ranges of consecutive hours."""
    ranges: list[list[datetime]] = []
    for h in sorted(hours):
        if ranges and ranges[-1][1] == h:
            ranges[-1][1] = h + _HOUR
        else:
            ranges.append([h, h + _HOUR])
    return [(a, b) for a, b in ranges]


def _day_ranges(days: list[datetime]) -> list[tuple[datetime, datetime]]:
    """Sorted days as [start, end) ranges of at most _DAYS_PER_STATEMENT consecutive days."""
    ranges: list[list[datetime]] = []
    for d in sorted(days):
        if ranges and ranges[-1][1] == d and ranges[-1][1] - ranges[-1][0] < _DAYS_PER_STATEMENT * _DAY:
            ranges[-1][1] = d + _DAY
        else:
            ranges.append([d, d + _DAY])
    return [(a, b) for a, b in ranges]


def _days_between(first: date, last: date) -> list[datetime]:
    return [datetime.combine(first, datetime.min.time()) + i * _DAY for i in range((last - first).days + 1)]


def _ts(value: datetime) -> str:
    return quote_literal(str(value)) + "::TIMESTAMP"


class ReaderFile:
    """Refreshes the reader file at `dest` from the store `con` is connected to."""

    def __init__(self, con: duckdb.DuckDBPyConnection, dest: str | Path):
        self.con = con
        self.dest = Path(dest)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._holds: dict[Path, int] = {}   # the refresh each data file holds, once this object wrote it
        self.pin_s = 0.0          # the last refresh's time on the caller's thread
        self.copy_s = 0.0         # ... and in the background, up to the switch of the link
        self.incremental = False  # whether the last refresh copied only the hours changed

    def busy(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Begin a refresh; call only between transactions of `con` with no rollup delta
        pending (after a fold). False, nothing begun, while the previous one is running."""
        if self.busy():
            return False
        self._reap()
        started = time.perf_counter()
        _remove(_tmp_path(self.dest))
        refresh = self._stamp()
        cur = self.con.cursor()
        try:
            cur.execute("BEGIN TRANSACTION")
            # the first read of the live database fixes the state the whole refresh sees
            if has_pending_rollups(cur):
                raise RuntimeError("reader file refresh with rollup deltas pending: fold first")
        except BaseException:
            _abandon(cur, None)
            raise
        self.pin_s = time.perf_counter() - started
        self._thread = threading.Thread(target=self._refresh, args=(cur, refresh, started),
                                        name="reader-file", daemon=True)
        self._thread.start()
        return True

    def _stamp(self) -> int | None:
        """Number this refresh and stamp the change log rows not yet stamped with it; prune
        the rows both data files have seen. None for a store without the log."""
        cur = self.con.cursor()
        try:
            if not _has_change_log(cur):
                return None
            with transaction(cur):
                row = cur.execute("UPDATE reader_state SET refresh = refresh + 1 RETURNING refresh").fetchone()
                if row is None:
                    return None   # a store whose log was never set up (a lake's tables)
                cur.execute("UPDATE reader_changes SET refresh = ? WHERE refresh IS NULL", [row[0]])
                if len(self._holds) == len(_SLOTS):
                    seen = min(self._holds.values())
                    cur.execute("DELETE FROM reader_changes WHERE refresh <= ?", [seen])
                    cur.execute("UPDATE reader_state SET pruned = greatest(pruned, ?)", [seen])
            return row[0]
        finally:
            cur.close()

    def _refresh(self, cur: duckdb.DuckDBPyConnection, refresh: int | None, started: float) -> None:
        target = _linked(self.dest)
        target = data_files(self.dest)[1] if target == data_files(self.dest)[0] else data_files(self.dest)[0]
        readers = _readers_of(self.dest)
        with readers.cond:   # this process's readers of that file finish first; new ones open the linked one
            readers.cond.wait_for(lambda: not readers.held.get(os.path.realpath(target)))
        aux = self.con.cursor()
        tmp = None
        try:
            apply_views(cur)   # the day figures' macros (sql/views/305_day_figures.sql), on this cursor's temp catalog
            tables = reader_tables(cur)
            source = quote_ident(cur.execute("SELECT current_database()").fetchone()[0])
            identity = cur.execute("SELECT store_id, pruned FROM reader_state").fetchone() if refresh else None
            hours = self._attach_to_update(cur, aux, target, tables, refresh, identity)
            if hours is None:
                tmp = _tmp_path(self.dest)
                aux.execute(f"ATTACH {quote_literal(str(tmp))} AS {_ALIAS}")   # DuckDB 1.5 binds no ATTACH parameter
                self._copy_whole(cur, source, tables)
                self._days(cur, tables, None)
                if identity:
                    cur.execute(f"CREATE TABLE {_ALIAS}.{_STATE} AS SELECT ?::VARCHAR AS store_id, ?::BIGINT AS refresh",
                                [identity[0], refresh])
            else:
                self._apply(cur, source, tables, hours)
                self._days(cur, tables, hours)
                cur.execute(f"UPDATE {_ALIAS}.{_STATE} SET refresh = ?", [refresh])
            changed_only = hours is not None
            if not self._counts_agree(cur, source, tables):
                # the log missed a change (a writer that does not name its hours): copy all, same pinned state
                log.warning("reader file %s: row counts differ after copying the changed hours; copying all",
                            target)
                self._apply(cur, source, tables, None)
                self._days(cur, tables, None)
                changed_only = False
                if not self._counts_agree(cur, source, tables):
                    raise RuntimeError("the reader file's row counts differ from the store's")
            cur.execute("COMMIT")
            cur.close()
            aux.execute("DETACH " + _ALIAS)  # checkpoints the file: no WAL beside it
            if tmp is not None:
                self._settle(aux, tmp, tables)
            written = tmp or target
            fsync_path(written)
            if tmp is not None:
                os.replace(tmp, target)   # a reader of the old file keeps it until it closes it
            self._link(target, readers)
            self.incremental = changed_only
            if refresh:
                self._holds[target] = refresh
            else:
                self._holds.pop(target, None)
            self.copy_s = time.perf_counter() - started - self.pin_s
            log.debug("reader file %s refreshed (%s): %.3f s pinned, %.3f s copying", self.dest,
                      "changed hours" if self.incremental else "whole", self.pin_s, self.copy_s)
        except BaseException as exc:  # noqa: BLE001 - reported by wait() / the next start()
            _abandon(cur, tmp)
            with contextlib.suppress(duckdb.Error):   # attached after the pin, by the other cursor
                aux.execute("DETACH DATABASE IF EXISTS " + _ALIAS)
            aux.close()
            _link_tmp_path(self.dest).unlink(missing_ok=True)
            self._holds.pop(target, None)
            self._error = exc

    @staticmethod
    def _settle(aux, path: Path, tables) -> None:
        """Write the latest hour's rows of each hour-keyed table, and the latest day's of
        each day figure, again (the same rows) in a file a whole copy just wrote. The first
        commits that change a DuckDB table written in bulk cost about 1 s per GB of file
        (its second checkpoint whatever it changes, then each table's first delete): paid
        here, not by the first changed-hours refresh, which would take 2-5 s instead of
        1.2-1.5 s at 8,000 GPUs with 3 months held (bench/RESULTS.md). The latest rows,
        because the next refreshes replace them anyway."""
        aux.execute(f"ATTACH {quote_literal(str(path))} AS {_ALIAS}")
        with transaction(aux):
            for name, with_rows, by_hour, by_day in tables:
                if not (by_day or by_hour and with_rows):
                    continue
                table, key = f"{_ALIAS}.{quote_ident(name)}", READER_DAY_FIGURES[name][1] if by_day else "hour"
                latest = aux.execute(f"SELECT max({key}) FROM {table}").fetchone()[0]
                if latest is None:
                    continue
                aux.execute(f"CREATE TEMP TABLE reader_settle AS SELECT * FROM {table} WHERE {key} = ?", [latest])
                aux.execute(f"DELETE FROM {table} WHERE {key} = ?", [latest])
                aux.execute(f"INSERT INTO {table} SELECT * FROM reader_settle")
                aux.execute("DROP TABLE reader_settle")
        aux.execute("DETACH " + _ALIAS)

    def _attach_to_update(self, cur, aux, target: Path, tables, refresh: int | None,
                          identity) -> list[datetime] | None:
        """ATTACH `target` when it can be brought up to the pinned state by the changed
        hours, and return those hours; None (nothing attached) when it must be copied whole."""
        if refresh is None or not target.is_file():
            return None
        try:
            aux.execute(f"ATTACH {quote_literal(str(target))} AS {_ALIAS}")
        except duckdb.Error as exc:   # a reader holds it (another process's lock), or it is no DuckDB file
            log.info("reader file %s: cannot update %s in place (%s); copying whole", self.dest, target, exc)
            return None
        hours = self._changed_hours(cur, aux, tables, refresh, identity)
        if hours is None:
            aux.execute("DETACH " + _ALIAS)
        return hours

    def _changed_hours(self, cur, aux, tables, refresh: int, identity) -> list[datetime] | None:
        """The hours changed since the state the attached file holds, read in the pinned
        state; None where the log cannot say."""
        columns = ("SELECT table_name, list(column_name || ' ' || data_type ORDER BY column_index) "
                   "FROM duckdb_columns() WHERE database_name = {} AND schema_name = 'main' "
                   f"AND table_name <> '{_STATE}' GROUP BY table_name")
        theirs = dict(aux.execute(columns.format(quote_literal(_ALIAS))).fetchall())
        ours = dict(cur.execute(columns.format("current_database()")).fetchall())
        if theirs != {name: ours[name] for name, *_ in tables}:
            return None
        if not aux.execute(f"SELECT count(*) FROM duckdb_tables() WHERE database_name = ? AND table_name = '{_STATE}'",
                           [_ALIAS]).fetchone()[0]:
            return None
        state = aux.execute(f"SELECT store_id, refresh FROM {_ALIAS}.{_STATE}").fetchall()
        store_id, pruned = identity
        if len(state) != 1 or state[0][0] != store_id or state[0][1] is None or not pruned <= state[0][1] < refresh:
            return None
        held = state[0][1]
        everything, hours = cur.execute(
            "SELECT bool_or(hour IS NULL), list(DISTINCT hour) FILTER (hour IS NOT NULL) FROM reader_changes "
            "WHERE refresh IS NULL OR refresh > ?", [held]).fetchone()
        if everything:
            return None
        return hours or []

    @staticmethod
    def _copy_whole(cur, source: str, tables) -> None:
        for name, with_rows, *_ in tables:
            cur.execute(f"CREATE TABLE {_ALIAS}.{quote_ident(name)} AS SELECT * FROM {source}.main.{quote_ident(name)}"
                        + ("" if with_rows else " LIMIT 0"))

    @staticmethod
    def _apply(cur, source: str, tables, hours: list[datetime] | None) -> None:
        """Replace the rows of `hours` in the hour-keyed tables and every other table whole
        (every table whole for None)."""
        ranges = _hour_ranges(hours or [])
        for name, with_rows, by_hour, _ in tables:
            if not with_rows:
                continue
            theirs, ours = f"{_ALIAS}.{quote_ident(name)}", f"{source}.main.{quote_ident(name)}"
            if hours is None or not by_hour:
                where = ["TRUE"]
            elif len(ranges) <= _MAX_RANGES:   # a range each: the scans skip the other row groups
                where = [f"hour >= {_ts(a)} AND hour < {_ts(b)}" for a, b in ranges]
            else:
                where = ["hour IN (" + ", ".join(_ts(h) for h in hours) + ")"]
            for w in where:
                cur.execute(f"DELETE FROM {theirs} WHERE {w}")
                cur.execute(f"INSERT INTO {theirs} SELECT * FROM {ours} WHERE {w}")

    @staticmethod
    def _days(cur, tables, hours: list[datetime] | None) -> None:
        """Recompute the day figures of the days of `hours` (every day the store holds for
        None) from the pinned store's hours; the health events from the first of those days
        to the last day held."""
        if hours is None:
            first, last = cur.execute("SELECT min(hour)::DATE, max(hour)::DATE FROM (SELECT hour FROM gpu_hour "
                                      "UNION ALL SELECT hour FROM slice_hour)").fetchone()
            days = _days_between(first, last) if first is not None else []
        else:
            days = sorted({datetime.combine(h.date(), datetime.min.time()) for h in hours})
        # the health events read each GPU's ECC reading before their first day from the file's
        # GPU-days, which the loop writes first (tables come in name order)
        cur.execute(sql_text("ingest/reader_ecc_before.sql"))
        last = cur.execute("SELECT max(hour)::DATE FROM gpu_hour").fetchone()[0]   # the health events' end
        onward = _days_between(days[0].date(), max(days[-1].date(), last or days[-1].date())) if days else []
        for name, *_, by_day in tables:
            if not by_day:
                continue
            macro, key = READER_DAY_FIGURES[name]
            theirs = f"{_ALIAS}.{quote_ident(name)}"
            if hours is None:
                cur.execute(f"DELETE FROM {theirs}")
            elif name in _ONWARD and onward:
                cur.execute(f"DELETE FROM {theirs} WHERE {key} >= {_ts(onward[0])}")
            for a, b in _day_ranges(onward if hours is not None and name in _ONWARD else days):
                if hours is not None and name not in _ONWARD:
                    cur.execute(f"DELETE FROM {theirs} WHERE {key} >= {_ts(a)} AND {key} < {_ts(b)}")
                # the slice-hours on health events: on the events just written (tables come in name order)
                noted = (f", {quote_literal(_ALIAS + '.main.reader_health_event')}"
                         if name == "reader_health_event_slice" else "")
                cur.execute(f"INSERT INTO {theirs} BY NAME SELECT * FROM {macro}({_ts(a)}, {_ts(b)}{noted})")

    @staticmethod
    def _counts_agree(cur, source: str, tables) -> bool:
        counts = " UNION ALL ".join(
            f"SELECT {quote_literal(name)}, (SELECT count(*) FROM {_ALIAS}.{quote_ident(name)}), "
            + (f"(SELECT count(*) FROM {source}.main.{quote_ident(name)})" if with_rows else "0")
            for name, with_rows, _, by_day in tables if not by_day)
        differ = [row for row in cur.execute(counts).fetchall() if row[1] != row[2]]
        if differ:
            log.warning("reader file: row counts (file, store) differ: %s", differ)
        return not differ

    def _link(self, target: Path, readers: _Readers) -> None:
        """Point PATH at `target`: a new link renamed over PATH (a plain file there from
        before included)."""
        link = _link_tmp_path(self.dest)
        link.unlink(missing_ok=True)
        os.symlink(target.name, link)
        with readers.cond:
            os.replace(link, self.dest)
        fsync_path(self.dest.parent)

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
