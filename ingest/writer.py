"""Write one ingest batch to DuckDB: raw rows, rollups, dead letters and offsets, atomically.

The transaction is the exactly-once boundary: the Kafka offsets a batch consumed are
stored with the rows it produced, so after a crash the consumer resumes exactly after the
last committed batch (ingest/consumer.py seeks to these offsets).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import queue
import threading
import time
from dataclasses import dataclass, field

import logging

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from slicemeter.store import is_write_conflict, registered, retry_conflicts, sql_text, transaction
from slicemeter.store.script import execute_script
from slicemeter.ingest.strings import StringIds
from slicemeter import clock
from slicemeter.tick import TickBatch

log = logging.getLogger("slicemeter.ingest")

_DEAD_SCHEMA = pa.schema([
    ("received_at", pa.timestamp("us")), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("key", pa.binary()), ("payload", pa.binary()), ("error", pa.string()),
    ("payload_bytes", pa.int64()), ("payload_sha256", pa.binary()),
])
# What a dead letter keeps of its record: enough to recognise it (the payload's length and
# SHA-256 find it in the log) and bounded, so that however much junk one batch reads, its
# dead letters cost at most DEAD_LETTER_BYTES each (docs/ingest.md, Dead letters).
DEAD_PAYLOAD_PREFIX = 1024
DEAD_KEY_PREFIX = 256
DEAD_ERROR_CHARS = 1024
DEAD_LETTER_BYTES = DEAD_PAYLOAD_PREFIX + DEAD_KEY_PREFIX + 4 * DEAD_ERROR_CHARS + 256
_OFFSET_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("next_offset", pa.int64()),
                            ("last_digest", pa.binary())])
_BINDING_SCHEMA = pa.schema([("kind", pa.string()), ("name", pa.string()), ("cluster", pa.string())])


def record_digest(key: bytes | None, value: bytes | None) -> bytes:
    """Identifies one Kafka record (the last one below a stored offset: the resume check)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(len(key or b"").to_bytes(4, "little"))
    h.update(key or b"")
    h.update(value or b"")
    return h.digest()


# DuckDB's row group size. raw_slice_rows takes only whole row groups; the remainder of a
# batch waits in raw_slice_tail for the next one (sql/schema/003_raw_slice_tail.sql).
# Batches whose slice rows come close to whole row groups (batch_full) keep that
# remainder, which is stored twice, below one message's rows.
ROW_GROUP_ROWS = 122_880


def configure_writes(con: duckdb.DuckDBPyConnection, memory_limit: str) -> None:
    """The ingest's DuckDB settings (per database: the writer's cursor shares them)."""
    con.execute("SET memory_limit = ?", [memory_limit])
    # DuckDB checkpoints when the WAL passes 16 MB by default, every few batches while a
    # backlog drains; 64 MB checkpoints less often and still keeps the not-yet-checkpointed
    # data small (RSS bound). With slice rows stored in whole row groups a checkpoint costs
    # little, so either threshold gives the same rate and RSS.
    con.execute("SET checkpoint_threshold = '64MB'")
    # Raw rows need no physical order (every reader orders or groups by ts_ms). Without
    # it DuckDB compresses the row groups of one insert on both cores within the memory
    # limit (measured: 245,760-row inserts 2.7 M rows/s against 1.6 M keeping insertion
    # order under a 160 MB limit; the 10 M-sample bench ~10 % faster).
    con.execute("SET preserve_insertion_order = false")


def batch_full(samples: int, slice_rows: int, batch_samples: int, held: int = 0) -> bool:
    """Whether a batch is big enough to store: about `batch_samples` samples, rounded so
    that its slice rows (most of the samples) and the `held` rows waiting in raw_slice_tail
    fill whole DuckDB row groups."""
    groups = round(batch_samples * slice_rows / samples / ROW_GROUP_ROWS) if samples else 0
    if groups < 1:
        return samples >= batch_samples
    return held + slice_rows >= groups * ROW_GROUP_ROWS


@dataclass
class Batch:
    """The messages of one transaction, as the consumer collects them."""

    gpus: list[pa.Table] = field(default_factory=list)     # decoded Tick tables (slicemeter.tick)
    slices: list[pa.Table] = field(default_factory=list)
    dead: list[dict] = field(default_factory=list)
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    # (topic, partition, offset, key, payload) of the message of a one-message batch, the
    # way a rejected batch is stored again (ingest/consumer.py): if the store rejects this
    # message too, it becomes a dead letter with its payload
    source: tuple | None = None
    samples: int = 0
    slice_rows: int = 0
    messages: int = 0
    decoded_bytes: int = 0      # its messages' tables and dead letters in memory (the batch byte bound)
    # each partition's last record, and its digest (record_digest, taken once per batch)
    last_records: dict[tuple[str, int], tuple[bytes | None, bytes | None]] = field(default_factory=dict)
    digests: dict[tuple[str, int], bytes] = field(default_factory=dict)
    first_offsets: dict[tuple[str, int], int] = field(default_factory=dict)   # where it is read again from
    bindings: list[dict] = field(default_factory=list)   # GPUs and nodes first seen (ingest/trust.py)
    instants: list[tuple[str, np.ndarray]] = field(default_factory=list)   # each message's node and instants

    def __bool__(self) -> bool:
        return bool(self.next_offsets)

    def seal(self) -> None:
        """Take the digests of the partitions' last records (the batch takes no more)."""
        self.digests = {tp: record_digest(key, value) for tp, (key, value) in self.last_records.items()}
        self.last_records = {}

    def full(self, batch_samples: int, held: int = 0) -> bool:
        return batch_full(self.samples, self.slice_rows, batch_samples, held)

    def add_tables(self, tick: TickBatch) -> None:
        """Take in a decoded message's tables."""
        self.gpus.append(tick.gpus)
        self.slices.append(tick.slices)
        node, instants = tick.node_instants()
        if node is not None:
            self.instants.append((node, instants))
        self.samples += tick.sample_count
        self.slice_rows += tick.slices.num_rows
        self.decoded_bytes += tick.decoded_bytes

    def add_dead(self, letter: dict) -> None:
        self.dead.append(letter)
        self.decoded_bytes += DEAD_LETTER_BYTES


@dataclass
class PreparedBatch:
    """A batch ready for its transaction: contiguous id-encoded rows and their rollup deltas.

    Everything that only reads the batch (concatenation, string ids, aggregation to hours)
    happens in `prepare`, on the consumer's thread, while the writer thread stores the
    previous batch; the transaction is left with appends and small upserts."""

    gpu: pa.Table | None
    slice: pa.Table | None             # the rows held back in raw_slice_tail, then the batch's
    slice_held: int                    # how many rows of `slice` are held back ones
    strings: pa.Table                  # new (id, value) string ids
    inventory: pa.Table | None         # merged gpu_inventory rows of the batch's GPUs
    gpu_hours: pa.Table | None         # per GPU-hour deltas
    slice_hours: pa.Table | None       # per slice-hour deltas
    dead: list[dict]
    next_offsets: dict[tuple[str, int], int]
    source: tuple | None
    samples: int
    messages: int
    # fold the rollup deltas pending in the store, this batch's included, into the rollups
    # in this batch's transaction (sql/ingest/fold_rollups.sql); the consumer folds every
    # few batches and at every flush
    fold_rollups: bool = True
    # (topic, partition, offset, error) of the one message the store rejected: a dead letter
    # for a store failure, not for the data (a drain that meets one has not stored everything)
    store_rejected: tuple[str, int, int, str] | None = None
    digests: dict[tuple[str, int], bytes] = field(default_factory=dict)
    bindings: list[dict] = field(default_factory=list)
    first_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    instants: pa.Table | None = None   # node_id, ts_ms: a row per instant of each message
    # on a lake: the worker's name and the epoch it took each consumed partition at; the
    # batch is stored only while they are the partitions' latest (sql/lake/foreign_owners.sql)
    owner: str | None = None
    epochs: dict[tuple[str, int], int] = field(default_factory=dict)


def fold_only() -> PreparedBatch:
    """A batch that stores nothing and folds the pending rollup deltas (a flush with no
    batch in hand)."""
    return PreparedBatch(gpu=None, slice=None, slice_held=0,
                         strings=pa.table({"id": pa.array([], pa.int32()), "value": pa.array([], pa.string())}),
                         inventory=None, gpu_hours=None, slice_hours=None, dead=[], next_offsets={},
                         source=None, samples=0, messages=0)


class InventoryCache:
    """gpu_inventory as the consumer knows it: the store's rows plus every prepared batch.

    A batch's slice shares divide by the memory size of their GPU as known once the batch's
    own GPU rows are merged in; holding the (small: a row per GPU) inventory in memory lets
    `prepare` compute them without waiting for the previous batch's transaction."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.known = con.sql("SELECT * FROM gpu_inventory_latest").to_arrow_table()

    def merge(self, con: duckdb.DuckDBPyConnection, batch_gpu: pa.Table) -> tuple[pa.Table, pa.Table]:
        """(merged rows of batch_gpu's GPUs, every known GPU with those merged in); the
        caller keeps the second as `known` once its batch is prepared."""
        with registered(con, known_inventory=self.known, batch_gpu=batch_gpu):
            touched = con.sql(sql_text("ingest/batch_inventory.sql")).to_arrow_table()
            with registered(con, batch_inventory=touched):
                known = con.sql("SELECT * FROM known_inventory ANTI JOIN batch_inventory USING (gpu_uuid_id) "
                                "UNION ALL BY NAME SELECT * FROM batch_inventory").to_arrow_table()
        return touched, known


def prepare(con: duckdb.DuckDBPyConnection, batch: Batch, strings: StringIds,
            inventory: InventoryCache, held: pa.Table | None = None) -> PreparedBatch:
    """Concatenate and id-encode a batch and aggregate it to hour deltas.

    `held`: the slice rows raw_slice_tail holds once the batches before are stored
    (`held_slice_table`); the batch's slice table starts with them, so that the rows that
    fill whole row groups are one contiguous run without another copy (`_split_slice_rows`).

    Reads no table of the store (only `inventory` and `held`, in memory), so it runs on a
    connection of its own while another one writes. Takes the batch's new string ids from
    `strings` (on error they stay pending there); `inventory` takes the batch's GPUs in
    only on success."""
    gpu = strings.encode_batch(batch.gpus)
    rows = strings.encode_batch(batch.slices, first=held)
    batch.gpus, batch.slices = [], []   # the per-message tables can go
    slice_held = held.num_rows if held is not None and rows is not None else 0
    sl = rows.slice(slice_held) if rows is not None else None   # the batch's own rows
    touched = gpu_hours = slice_hours = None
    if gpu is not None and sl is not None:
        touched, known = inventory.merge(con, gpu)
        with registered(con, batch_gpu=gpu, batch_slice=sl, known_inventory=known):
            gpu_hours = con.sql(sql_text("ingest/batch_gpu_hours.sql")).to_arrow_table()
            slice_hours = con.sql(sql_text("ingest/batch_slice_hours.sql")).to_arrow_table()
        inventory.known = known
    instants = _instants_table(batch.instants, strings) if batch.instants else None
    return PreparedBatch(gpu=gpu, slice=rows, slice_held=slice_held, strings=strings.take_pending(),
                         inventory=touched, gpu_hours=gpu_hours, slice_hours=slice_hours, dead=batch.dead,
                         next_offsets=batch.next_offsets, source=batch.source,
                         samples=batch.samples, messages=batch.messages, digests=batch.digests,
                         bindings=batch.bindings, first_offsets=batch.first_offsets, instants=instants)


def _instants_table(instants: list[tuple[str, np.ndarray]], strings: StringIds) -> pa.Table:
    """The batch's (node, instants) per message as node_id, ts_ms rows (its nodes' ids are
    known: their rows were encoded first)."""
    nodes = strings.ids([node for node, _ in instants])
    return pa.table({"node_id": pa.array(np.repeat(nodes, [len(ts) for _, ts in instants]), strings.id_type),
                     "ts_ms": pa.array(np.concatenate([ts for _, ts in instants]), pa.int64())})


def rejected_message(batch: Batch | PreparedBatch, error: Exception, strings: pa.Table) -> PreparedBatch:
    """A one-message batch the store rejected, as a dead letter that advances its offset.
    `strings`: the string ids the consumer assigned while preparing it (they are stored
    anyway: the consumer's cache knows them now).

    A message too big for DuckDB's memory limit is not bad data: that raises instead (a
    batch that runs out of memory is read again one message at a time first, like any
    rejected batch)."""
    if isinstance(error, duckdb.OutOfMemoryException):
        raise RuntimeError(f"one message does not fit DuckDB's memory limit ({error}); "
                           "raise --duckdb-memory") from error
    topic, partition, offset, key, payload = batch.source
    letter = dead_letter(topic, partition, offset, key, payload, f"rejected by the store: {error}")
    return PreparedBatch(gpu=None, slice=None, slice_held=0, strings=strings, inventory=None, gpu_hours=None,
                         slice_hours=None, dead=[*batch.dead, letter], next_offsets=batch.next_offsets,
                         source=None, samples=0, messages=batch.messages, digests=batch.digests,
                         store_rejected=(topic, partition, offset, str(error)),
                         owner=getattr(batch, "owner", None), epochs=dict(getattr(batch, "epochs", {})))


def _batch_tables(batch: PreparedBatch) -> dict[str, pa.Table]:
    """The Arrow tables a batch's transaction reads (sql/ingest/apply_batch.sql, the
    offsets, dead letters and bindings); the slice rows are split by the caller."""
    tables = {
        "batch_strings": batch.strings,
        "batch_offsets": pa.Table.from_pylist(
            [{"topic": t, "partition": p, "next_offset": o, "last_digest": batch.digests.get((t, p))}
             for (t, p), o in batch.next_offsets.items()], _OFFSET_SCHEMA),
        "batch_dead_letters": pa.Table.from_pylist(batch.dead, _DEAD_SCHEMA),
    }
    if batch.bindings:
        tables["batch_bindings"] = pa.Table.from_pylist(batch.bindings, _BINDING_SCHEMA)
    if batch.gpu is not None and batch.slice is not None:
        tables |= {"batch_gpu": batch.gpu, "batch_inventory": batch.inventory,
                   "gpu_hour_delta": batch.gpu_hours, "slice_hour_delta": batch.slice_hours}
    if batch.instants is not None:
        tables["batch_instants"] = batch.instants
    return tables


def _save_instants(con: duckdb.DuckDBPyConnection, tables: dict[str, pa.Table]) -> None:
    """Refuse the batch if it repeats an instant of a node (within itself or stored),
    else store its instants (sql/ingest/save_instants.sql)."""
    if "batch_instants" in tables:
        lo, hi = pc.min_max(tables["batch_instants"].column("ts_ms")).values()
        execute_script(con, "ingest/save_instants.sql", {"lo": lo.as_py(), "hi": hi.as_py()})


def _store_letters_bindings_offsets(con: duckdb.DuckDBPyConnection, batch: PreparedBatch,
                                    tables: dict[str, pa.Table], folder: str) -> None:
    """The end of every batch's transaction: its dead letters, bindings and offsets
    (`folder`: sql/ingest, or sql/lake for a lake)."""
    if batch.dead:
        con.execute(sql_text("ingest/save_dead_letters.sql"))
    if "batch_bindings" in tables:
        con.execute(sql_text(f"{folder}/save_bindings.sql"))
    con.execute(sql_text(f"{folder}/save_offsets.sql"))


_OWNER_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("epoch", pa.int64()),
                           ("owner", pa.string())])


class LakeCommitLost(Exception):
    """A batch the lake did not store, for its worker's ownership rather than its data:
    `fenced` names the partitions another worker took since (partition -> (owner, epoch)
    now); empty, a concurrent commit (a take-over, `bindings move`) won the race and the
    partitions are still this worker's. Either way nothing of the batch is stored, and
    the worker goes back to the stored offsets (ingest/consumer.py). `first_offsets`:
    where the batch the writer dropped starts in each partition, which is where a partition
    with no stored offset yet is read again from."""

    def __init__(self, fenced: dict[int, tuple[str | None, int | None]], reason: str):
        super().__init__(reason)
        self.fenced = fenced
        self.reason = reason
        self.first_offsets: dict[tuple[str, int], int] = {}


def foreign_owners(con: duckdb.DuckDBPyConnection, owners: pa.Table) -> dict[int, tuple[str | None, int | None]]:
    """partition -> (owner, epoch) of each partition in `owners` whose latest owner row is
    another (sql/lake/foreign_owners.sql)."""
    with registered(con, batch_owners=owners):
        return {p: (o, e) for p, o, e in con.execute(sql_text("lake/foreign_owners.sql")).fetchall()}


def owners_table(owner: str, epochs: dict[tuple[str, int], int], partitions) -> pa.Table:
    """The rows a lake commit checks and appends for the `partitions` ((topic, partition))
    it writes: the epoch `owner` took each at (sql/lake/foreign_owners.sql)."""
    missing = sorted(set(partitions) - set(epochs))
    if missing:
        raise RuntimeError(f"a lake commit writes partitions its worker has not taken: {missing}")
    return pa.Table.from_pylist([{"topic": t, "partition": p, "epoch": epochs[(t, p)], "owner": owner}
                                 for t, p in sorted(set(partitions))], _OWNER_SCHEMA)


@contextlib.contextmanager
def owned_transaction(con: duckdb.DuckDBPyConnection, owners: pa.Table | None, what: str):
    """A lake transaction that commits only while its worker owns the partitions in `owners`
    (None: it writes none): checked first (a take-over committed before), and the owner
    rows appended, so that a take-over committed during it fails the commit. Either is
    LakeCommitLost; any other refused commit a RuntimeError naming `what`."""
    try:
        with transaction(con):
            if owners is not None:
                if fenced := foreign_owners(con, owners):
                    raise LakeCommitLost(fenced, "another worker took the partitions")
                with registered(con, batch_owners=owners):
                    con.execute(sql_text("lake/save_owners.sql"))
            yield con
    except duckdb.TransactionException as exc:
        if not is_write_conflict(exc):
            raise RuntimeError(f"the lake refused {what}: {exc}") from exc
        fenced = foreign_owners(con, owners) if owners is not None else {}
        raise LakeCommitLost(fenced, f"a concurrent commit conflicted: {exc}") from exc


def take_partitions(con: duckdb.DuckDBPyConnection, topic: str, partitions: list[int], owner: str) -> dict[int, int]:
    """Take `partitions` of `topic` for the worker `owner` (sql/lake/take_partitions.sql):
    partition -> the epoch taken. One commit, done again while another take-over or a batch
    commits beside it (they conflict by design); once it commits, no other worker stores
    these partitions, so the offsets read after it are where they stand."""
    taken = pa.table({"partition": pa.array(partitions, pa.int32())})

    def take() -> dict[int, int]:
        with transaction(con), registered(con, taken=taken):
            execute_script(con, "lake/take_partitions.sql", {"topic": topic, "owner": owner})
            epochs = dict(con.execute('SELECT "partition", epoch FROM taken_epochs').fetchall())
        con.execute("DROP TABLE IF EXISTS taken_epochs")
        return epochs

    return retry_conflicts(take, attempts=100)


def write_lake(con: duckdb.DuckDBPyConnection, batch: PreparedBatch) -> float:
    """`write_prepared` for a DuckLake (store/lake.py): the batch's rows, rollup deltas,
    the money of the GPU-hours it touched, strings, dead letters and offsets appended in
    one lake transaction (exactly once across the workers of a group). Every slice row is
    stored: Parquet files need no whole row groups, so nothing is held back.

    Fenced: the transaction first checks that the worker still owns every partition the
    batch consumed and appends its owner rows, so a take-over committed before fails the
    check and one committed during it fails the commit; either is LakeCommitLost.

    A data error (duckdb.Error) is raised as it is: the consumer reads the batch again
    message by message. A commit the lake refused after its retries for another reason
    is raised as a RuntimeError, which stops the process; a restart resumes from the
    lake's offsets."""
    started = time.perf_counter()
    tables = _batch_tables(batch)
    # a batch with no owner (a bulk load, tests) is not fenced: ingest's always have one
    owners = owners_table(batch.owner, batch.epochs, batch.next_offsets) if batch.next_offsets and batch.owner else None
    if "batch_gpu" in tables:
        tables["batch_slice_rows"] = batch.slice
        batch.slice = None
    with owned_transaction(con, owners, "the batch's commit"), registered(con, **tables):
        if "batch_gpu" in tables:
            _save_instants(con, tables)
            con.execute(sql_text("lake/apply_batch.sql"))
            con.execute(sql_text("lake/keep_money.sql"))
        elif batch.strings.num_rows:
            con.execute(sql_text("lake/save_strings.sql"))
        _store_letters_bindings_offsets(con, batch, tables, "lake")
    return time.perf_counter() - started


def write_prepared(con: duckdb.DuckDBPyConnection, batch: PreparedBatch) -> float:
    """Store a prepared batch in one transaction; returns the seconds taken. Drops
    `batch.slice` (a rejected batch is read again from Kafka, never stored from memory).

    On error the transaction is rolled back and the error re-raised."""
    started = time.perf_counter()
    tables = _batch_tables(batch)
    with transaction(con):
        if "batch_gpu" in tables:
            tables |= _split_slice_rows(con, batch.slice, batch.slice_held)
            batch.slice = None  # `tables` holds the rows now: a rejected batch is kept without them
        with registered(con, **tables):
            _apply(con, batch, tables)
    return time.perf_counter() - started


def _apply(con: duckdb.DuckDBPyConnection, batch: PreparedBatch, tables: dict) -> None:
    """The statements that store a prepared batch, its `tables` registered."""
    if "batch_gpu" in tables:
        _save_instants(con, tables)
        con.execute(sql_text("ingest/apply_batch.sql"))
        if "batch_slice_head" in tables:
            con.execute(sql_text("ingest/store_slice_rows.sql"))
        con.execute(sql_text("ingest/hold_slice_rows.sql"))
    elif batch.strings.num_rows:
        con.execute("INSERT INTO ingest_strings SELECT id, value FROM batch_strings")
    if batch.fold_rollups:
        con.execute(sql_text("ingest/fold_rollups.sql"))
        con.execute(sql_text("ingest/keep_money.sql"))
    _store_letters_bindings_offsets(con, batch, tables, "ingest")


def held_slice_rows(con: duckdb.DuckDBPyConnection) -> int:
    """Slice rows waiting in raw_slice_tail for a whole row group."""
    return con.execute("SELECT count(*) FROM raw_slice_tail").fetchall()[0][0]


def held_slice_table(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """The slice rows waiting in raw_slice_tail, for `prepare` to put first in a batch."""
    return con.sql("SELECT * FROM raw_slice_tail").to_arrow_table()


def _whole_row_groups(rows: int) -> int:
    """How many of a slice table's rows (held-back ones first) go to raw_slice_rows: the
    writer stores them and the consumer's copy of what stays held back starts after them."""
    return rows // ROW_GROUP_ROWS * ROW_GROUP_ROWS


def held_after(batch: PreparedBatch, held: pa.Table | None) -> pa.Table | None:
    """The rows raw_slice_tail holds once `batch` is stored (its slice table's rows past
    the last whole row group), copied so that the batch's table can go."""
    if batch.slice is None:
        return held
    rest = batch.slice.slice(_whole_row_groups(batch.slice.num_rows))
    return rest.take(np.arange(rest.num_rows))


def _split_slice_rows(con: duckdb.DuckDBPyConnection, rows: pa.Table, held: int) -> dict[str, pa.Table]:
    """A batch's slice table (`held` rows held back in raw_slice_tail, then its own) as
    batch_slice_head, the rows that fill whole row groups (absent where they do not fill
    one), and batch_slice_rest, the batch's rows to hold back now
    (sql/schema/003_raw_slice_tail.sql). Both are slices of one contiguous table: DuckDB
    inserts each chunk of a chunked table, and each side of a UNION, on a thread of its
    own, and its row groups would end partial (measured).

    Runs in the batch's transaction: the held-back count is checked against the store's,
    so rows are never stored from a stale copy."""
    stored = held_slice_rows(con)
    if stored != held:
        raise RuntimeError(f"raw_slice_tail holds {stored} rows, the batch was prepared with {held}")
    whole = _whole_row_groups(rows.num_rows)
    if whole == 0:
        return {"batch_slice_rest": rows.slice(held)}
    return {"batch_slice_head": rows.slice(0, whole), "batch_slice_rest": rows.slice(whole)}


def write_batch(con: duckdb.DuckDBPyConnection, batch: Batch, strings: StringIds,
                inventory: InventoryCache | None = None, fold: bool = True) -> float:
    """Prepare and store `batch` on one connection (tests, bulk loads, the retry path);
    `fold`: fold the pending rollup deltas, this batch's included, into the rollups.

    Returns seconds taken. On error the string-id cache is reloaded and the error re-raised;
    an `inventory` passed in must then be rebuilt by the caller."""
    started = time.perf_counter()
    inventory = inventory or InventoryCache(con)
    try:
        prepared = prepare(con, batch, strings, inventory, held_slice_table(con))
        prepared.fold_rollups = fold
        write_prepared(con, prepared)
    except BaseException:
        strings.reload()
        raise
    return time.perf_counter() - started


def dead_letter(topic: str, partition: int, offset: int, key: bytes | None, payload: bytes | None, error: str) -> dict:
    """A refused record as a dead_letters row: prefixes of its key and payload, the
    payload's length and SHA-256, the reason (cut to DEAD_ERROR_CHARS)."""
    if len(error) > DEAD_ERROR_CHARS:
        error = error[: DEAD_ERROR_CHARS - 1] + "\u2026"
    return {"received_at": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None), "topic": topic,
            "partition": partition, "offset": offset, "key": None if key is None else bytes(key[:DEAD_KEY_PREFIX]),
            "payload": None if payload is None else bytes(payload[:DEAD_PAYLOAD_PREFIX]), "error": error,
            "payload_bytes": None if payload is None else len(payload),
            "payload_sha256": None if payload is None else hashlib.sha256(payload).digest()}


def stored_offsets(con: duckdb.DuckDBPyConnection, topic: str) -> dict[int, int]:
    return {p: o for p, (o, _) in stored_positions(con, topic).items()}


def stored_positions(con: duckdb.DuckDBPyConnection, topic: str) -> dict[int, tuple[int, bytes | None]]:
    """partition -> (next offset, digest of the record below it or None)."""
    rows = con.execute('SELECT "partition", next_offset, last_digest FROM ingest_offsets WHERE topic = ?',
                       [topic]).fetchall()
    return {p: (o, d) for p, o, d in rows}


def reset_offset(con: duckdb.DuckDBPyConnection, topic: str, partition: int, resume: int, stored: int | None,
                 log_start: int | None, high_watermark: int | None, reason: str,
                 script: str = "ingest/reset_offset.sql", owners: pa.Table | None = None) -> None:
    """Move a stored offset that does not fit the broker's log, recording why (`script`:
    sql/lake/reset_offset.sql on a lake, where `owners` fences it: owned_transaction)."""
    params = {"topic": topic, "partition": partition, "resume": resume, "stored": stored,
              "log_start": log_start, "high_watermark": high_watermark, "reason": reason}
    with owned_transaction(con, owners, "the offset's reset") if owners is not None else transaction(con):
        execute_script(con, script, params)


def apply_retention(con: duckdb.DuckDBPyConnection, days: float, now_ms: int | None = None,
                    accepted_age_ms: int = 0) -> None:
    """Drop raw samples older than `days`; rollups are kept for ever. The instants nodes
    reported stay while the timestamp window accepts a sample of their age
    (`accepted_age_ms`, Limits.max_age_ms), so a replay is refused by one or the other."""
    now_ms = clock.now_ms() if now_ms is None else now_ms
    cutoff = now_ms - int(days * 86_400_000)
    with transaction(con):
        execute_script(con, "ingest/retention.sql",
                       {"cutoff": cutoff, "instants_cutoff": min(cutoff, now_ms - accepted_age_ms)})


class BatchWriterThread:
    """Stores batches on a thread of its own, so Kafka fetch, decode and `prepare` of the
    next batch overlap the DuckDB transaction of this one (DuckDB and Arrow release the GIL
    while they work).

    A batch is handed over only once the previous one is stored: with the one being
    filled, at most two batches are in memory (a third, queued one cost as much again and
    bought nothing). Batches are written in order, each in its own transaction with its
    offsets, so exactly-once is unchanged.

    A batch the store rejects (duckdb.Error) is not retried here: the writer keeps it as
    `rejected`, ignores what is queued behind it, and the consumer re-reads its messages
    from Kafka as one-message batches (ingest/consumer.py), so no message payload has to
    be kept in memory for the rare retry. A one-message batch the store rejects becomes a
    dead letter. Any other failure stops the thread; check() re-raises its error in the
    caller (the process exits; restart replays from DuckDB).
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, write=None):
        from slicemeter.store import apply_views

        self._con = con.cursor()          # its own connection to the same database
        apply_views(self._con)            # TEMP macros and views are per connection
        self._write = write or write_prepared   # write_lake on a lake; looked up now (tests patch it)
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._done: queue.Queue = queue.Queue()
        self._error: BaseException | None = None
        self._rejected: PreparedBatch | None = None
        self._lost: LakeCommitLost | None = None
        self._thread = threading.Thread(target=self._run, name="duckdb-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            try:
                if batch is None:
                    return
                if self._error is None and self._rejected is None and self._lost is None:
                    self._store(batch)
            except LakeCommitLost as exc:   # what is queued behind is dropped too: see take_lost
                exc.first_offsets = dict(batch.first_offsets)
                self._lost = exc
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                self._error = exc
            finally:
                self._queue.task_done()

    def _store(self, batch: PreparedBatch) -> None:
        try:
            seconds = self._write(self._con, batch)
        except duckdb.Error as exc:
            if batch.source is None:
                log.warning("batch rejected by the store (%s); its %d messages are read again one by one",
                            exc, batch.messages)
                self._rejected = batch
                return
            batch = rejected_message(batch, exc, batch.strings)
            seconds = self._write(self._con, batch)
        dead = len(batch.dead)
        log.info("stored batch: %d samples, %d messages, %d dead letters, %.3f s",
                 batch.samples, batch.messages, dead, seconds)
        # drop the rows now: the main thread only needs the counts and offsets
        batch.gpu = batch.slice = batch.gpu_hours = batch.slice_hours = batch.inventory = None
        batch.dead, batch.source = [], None
        self._done.put((batch, seconds, dead))

    def has_rejected(self) -> bool:
        return self._rejected is not None

    def has_lost(self) -> bool:
        return self._lost is not None

    def take_lost(self) -> LakeCommitLost | None:
        """Why the lake stored none of the batches since the last one stored (they are
        dropped), once nothing is queued behind them; the writer takes batches again."""
        self._queue.join()
        lost, self._lost = self._lost, None
        return lost

    def take_rejected(self) -> PreparedBatch | None:
        """The batch the store rejected, once nothing is queued behind it; the writer takes
        batches again afterwards."""
        self._queue.join()
        rejected, self._rejected = self._rejected, None
        return rejected

    def put(self, batch: PreparedBatch) -> bool:
        """Queue `batch` once the previous one is stored (memory bound: see the class doc).
        False, and `batch` is not queued, if the previous one was rejected or not stored
        for a lost ownership race: see take_rejected, take_lost."""
        self._queue.join()
        self.check()
        if self._rejected is not None or self._lost is not None:
            return False
        self._queue.put(batch)
        return True

    def drain(self) -> None:
        self._queue.join()
        self.check()

    def idle(self) -> bool:
        return self._queue.unfinished_tasks == 0

    def check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"storing a batch failed: {self._error!r}") from self._error

    def finished(self) -> list[tuple[PreparedBatch, float, int]]:
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
