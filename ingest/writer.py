"""Write one ingest batch to DuckDB: raw rows, rollups, dead letters and offsets, atomically.

The transaction is the exactly-once boundary: the Kafka offsets a batch consumed are
stored with the rows it produced, so after a crash the consumer resumes exactly after the
last committed batch (ingest/consumer.py seeks to these offsets).
"""
from __future__ import annotations

import datetime as dt
import queue
import threading
import time
from dataclasses import dataclass, field

import logging

import duckdb
import pyarrow as pa

from ingest.store import sql_text
from ingest.strings import StringIds

log = logging.getLogger("slicemeter.ingest")

_DEAD_SCHEMA = pa.schema([
    ("received_at", pa.timestamp("us")), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("key", pa.binary()), ("payload", pa.binary()), ("error", pa.string()),
])
_OFFSET_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("next_offset", pa.int64())])


@dataclass
class Batch:
    """What one transaction writes; filled by the consumer, emptied by write_batch."""

    gpus: list[pa.Table] = field(default_factory=list)
    slices: list[pa.Table] = field(default_factory=list)
    dead: list[dict] = field(default_factory=list)
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    strings: pa.Table | None = None   # new string ids, taken when the batch is closed
    # (topic, partition, offset, key, payload) of each decoded message, in order: lets a
    # batch that DuckDB rejects be retried message by message (ingest/writer.py _isolate)
    sources: list[tuple] = field(default_factory=list)
    samples: int = 0
    messages: int = 0
    bytes: int = 0

    def __bool__(self) -> bool:
        return bool(self.next_offsets)


def _concat(tables: list[pa.Table]) -> pa.Table | None:
    # One contiguous chunk scans into DuckDB ~1.7x faster than hundreds of per-message chunks.
    return pa.concat_tables(tables).combine_chunks() if tables else None


def write_batch(con: duckdb.DuckDBPyConnection, batch: Batch, strings: StringIds) -> float:
    """Apply `batch` (tables already through strings.encode) in one transaction.

    Returns seconds taken. On error the transaction is rolled back, the string-id cache
    reloaded, and the error re-raised.
    """
    started = time.perf_counter()
    batch_gpu = _concat(batch.gpus)
    batch_slice = _concat(batch.slices)
    batch.gpus, batch.slices = [], []  # the per-message tables (and their Kafka payloads) can go
    batch_strings = batch.strings if batch.strings is not None else strings.take_pending()
    batch_offsets = pa.Table.from_pylist(
        [{"topic": t, "partition": p, "next_offset": o} for (t, p), o in batch.next_offsets.items()], _OFFSET_SCHEMA)
    batch_dead_letters = pa.Table.from_pylist(batch.dead, _DEAD_SCHEMA)
    con.execute("BEGIN TRANSACTION")
    try:
        for name, table in (("batch_strings", batch_strings), ("batch_offsets", batch_offsets),
                            ("batch_dead_letters", batch_dead_letters)):
            con.register(name, table)
        if batch_gpu is not None and batch_slice is not None:
            con.register("batch_gpu", batch_gpu)
            con.register("batch_slice", batch_slice)
            con.execute(sql_text("ingest/apply_batch.sql"))
        elif batch_strings.num_rows:
            con.execute("INSERT INTO ingest_strings SELECT id, value FROM batch_strings")
        if batch_dead_letters.num_rows:
            con.execute(sql_text("ingest/save_dead_letters.sql"))
        con.execute(sql_text("ingest/save_offsets.sql"))
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        strings.reload()
        raise
    finally:
        for name in ("batch_gpu", "batch_slice", "batch_strings", "batch_offsets", "batch_dead_letters"):
            con.unregister(name)
    return time.perf_counter() - started


def dead_letter(topic: str, partition: int, offset: int, key: bytes | None, payload: bytes | None, error: str) -> dict:
    return {"received_at": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None), "topic": topic,
            "partition": partition, "offset": offset, "key": key, "payload": payload, "error": error}


def stored_offsets(con: duckdb.DuckDBPyConnection, topic: str) -> dict[int, int]:
    rows = con.execute('SELECT "partition", next_offset FROM ingest_offsets WHERE topic = ?', [topic]).fetchall()
    return {p: o for p, o in rows}


def apply_retention(con: duckdb.DuckDBPyConnection, days: float, now_ms: int | None = None) -> None:
    """Drop raw samples older than `days`; rollups are kept for ever."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    cutoff = now_ms - int(days * 86_400_000)
    con.execute("BEGIN TRANSACTION")
    try:
        # DuckDB binds parameters of one statement per execute
        for statement in filter(str.strip, sql_text("ingest/retention.sql").split(";")):
            con.execute(statement, {"cutoff": cutoff})
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise


class BatchWriterThread:
    """Stores batches on a thread of its own, so Kafka fetch and decode of the next batch
    overlap the DuckDB transaction of this one (DuckDB releases the GIL while it works).

    A batch is handed over only once the previous one is stored: with the one being
    filled, at most two batches are in memory (a third, queued one cost as much again and
    bought nothing: the writer is the slower side). Batches are written in order, each in its own transaction with
    its offsets, so exactly-once is unchanged. A failed batch stops the thread; check()
    re-raises its error in the caller (the process exits; restart replays from DuckDB).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection):
        from ingest.store import apply_views

        self._con = con.cursor()          # its own connection to the same database
        apply_views(self._con)            # TEMP macros and views are per connection
        self._strings = _NoStrings()
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._done: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._busy = threading.Event()
        self._thread = threading.Thread(target=self._run, name="duckdb-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    return
                if self._error is None:
                    try:
                        seconds = write_batch(self._con, batch, self._strings)
                    except duckdb.Error as exc:
                        log.warning("batch rejected (%s); retrying its %d messages one by one", exc, len(batch.sources))
                        seconds = self._isolate(batch)
                    dead = len(batch.dead)
                    log.info("stored batch: %d samples, %d messages, %d dead letters, %.3f s",
                             batch.samples, batch.messages, dead, seconds)
                    # drop the rows now: the main thread only needs the counts and offsets
                    batch.gpus, batch.slices, batch.dead, batch.strings, batch.sources = [], [], [], None, []
                    self._done.put((batch, seconds, dead))
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                self._error = exc
            finally:
                self._queue.task_done()

    def _isolate(self, batch: Batch) -> float:
        """Store a rejected batch message by message: a message DuckDB rejects (say, a
        timestamp out of range) becomes a dead letter with DuckDB's error; the rest is stored.
        Each step is its own transaction with its offsets, so exactly-once still holds."""
        from slicemeter.tick import decode

        started = time.perf_counter()
        lookup = StringIds(self._con)            # committed ids ...
        lookup.add_known(batch.strings)          # ... plus the ones this batch introduced
        write_batch(self._con, Batch(dead=batch.dead, strings=batch.strings), self._strings)
        samples = 0
        for topic, partition, offset, key, payload in batch.sources:
            tick = decode(payload)
            one = Batch(gpus=[lookup.encode(tick.gpus)], slices=[lookup.encode(tick.slices)],
                        next_offsets={(topic, partition): offset + 1}, strings=lookup.take_pending())
            try:
                write_batch(self._con, one, self._strings)
                samples += tick.sample_count
            except duckdb.Error as exc:
                letter = dead_letter(topic, partition, offset, key, payload, f"rejected by the store: {exc}")
                write_batch(self._con, Batch(dead=[letter], next_offsets={(topic, partition): offset + 1}),
                            self._strings)
                batch.dead.append(letter)
        write_batch(self._con, Batch(next_offsets=batch.next_offsets), self._strings)
        batch.samples = samples
        return time.perf_counter() - started

    def put(self, batch: Batch) -> None:
        self._queue.join()   # the previous batch is stored (memory bound: see the class doc)
        self.check()
        self._queue.put(batch)

    def drain(self) -> None:
        self._queue.join()
        self.check()

    def idle(self) -> bool:
        return self._queue.unfinished_tasks == 0

    def check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"storing a batch failed: {self._error!r}") from self._error

    def finished(self) -> list[tuple[Batch, float, int]]:
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=60)
        self._con.close()


class _NoStrings:
    """The writer thread never owns the string cache: batches carry their new strings."""

    def take_pending(self) -> pa.Table:
        return pa.table({"id": pa.array([], pa.int32()), "value": pa.array([], pa.string())})

    def reload(self) -> None:
        pass
