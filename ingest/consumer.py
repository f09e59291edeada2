"""Kafka -> DuckDB: the ingest consumer.

Exactly once: every batch is one DuckDB transaction holding the decoded rows, their
rollup updates, the dead letters and the next offset of every partition it consumed
(ingest/writer.py). On start and on every partition assignment the consumer seeks to the
offsets stored in DuckDB, so a crash at any instant replays exactly the uncommitted tail.
The Kafka commit after each transaction is secondary: it only serves lag tools and the
hand-over of a partition to another worker of the group that has no stored offset for it.

Tansu (the test broker) gets end_offsets / seek_to_end / 'latest' wrong: we
only use stored or committed offsets, seek_to_beginning and highwater().
"""
from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from slicemeter import store
from slicemeter.ingest import kafka_batches
from slicemeter.ingest.kafka_batches import RefusedBatch
from slicemeter.ingest.metrics import IngestMetrics
from slicemeter.store.backup import BackupServer
from slicemeter.store.reader_file import ReaderFile
from slicemeter.ingest.strings import HashedStringIds, StringIds
from slicemeter.ingest.trust import Bindings, Publisher, RecentInstants, verify
from slicemeter.ingest.writer import (Batch, BatchWriterThread, InventoryCache, apply_retention, dead_letter,
                           configure_writes, fold_only, held_after, held_slice_table, prepare, record_digest,
                           rejected_message, reset_offset, stored_offsets, stored_positions, take_partitions,
                           write_lake, LakeCommitLost, owners_table)
from slicemeter.store import has_pending_rollups, lake
from slicemeter import clock
from slicemeter.tick import (MAX_DECODED_BYTES, Limits, TickBatch, TickDecodeError, decode, implausible,
                             repeated_key)

log = logging.getLogger("slicemeter.ingest")
# A fold of the rollups (health, DRA and kept-money columns) runs beside the readers' file
# copy within one limit: at 100 MB the demo's month ran out; DuckDB 1.5 (a lake install's
# version, pyproject) needs more than 2.0 for the same fold
DEFAULT_DUCKDB_MEMORY = "160MB" if int(duckdb.__version__.split(".")[0]) >= 2 else "256MB"


@dataclass
class IngestConfig:
    bootstrap: str
    db: Path
    topic: str = "slicemeter.ticks"
    group: str | None = "slicemeter-ingest"    # None: assign every partition, no group
    # a stable member identity (KIP-345 static membership): a worker restarted with the same
    # one gets its partitions back without waiting out its dead self's session (docs/operations.md)
    group_instance_id: str | None = None
    batch_samples: int = 250_000                # flush when a batch holds this many samples
    batch_bytes: int = 64 << 20                 # ... or this many decoded bytes (the memory bound, docs/ingest.md)
    batch_max_s: float = 1.0                    # ... or when its first message is this old
    fold_every_batches: int = 8                 # rollup deltas wait this many batches at most, or a flush
    max_poll_records: int = 200
    max_partition_fetch_bytes: int = 4 << 20    # bounded fetch buffers: they bound the RSS
    fetch_max_bytes: int = 16 << 20
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    until_idle_s: float | None = None           # exit once caught up, or after this long without records
    # a drain idle while other members hold partitions waits this long for them to come to
    # it (a dead member's, once its session times out); None: twice the session timeout
    drain_wait_s: float | None = None
    raw_retention_days: float = 35.0
    retention_every_s: float = 600.0
    snapshot: Path | None = None
    snapshot_interval_s: float = 60.0
    overlap: bool = True                        # store batch N while fetching batch N+1
    duckdb_memory: str = DEFAULT_DUCKDB_MEMORY  # DuckDB's memory limit (part of the RSS bound)
    client_id: str = "slicemeter-ingest"
    limits: Limits = field(default_factory=Limits)   # what a stored sample may claim (slicemeter.tick)
    publishers: dict[str, Publisher] | None = None   # signing keys and their clusters; None: unsigned accepted
    dedupe_window_s: float = 3600.0             # a node's instants remembered this long (ingest/trust.py)
    clock_ms: Callable[[], int] = field(default=clock.now_ms)   # the timestamp window's now (SLICEMETER_NOW too)
    kafka_security: dict = field(default_factory=dict)   # SASL / TLS settings of the KafkaConsumer
    extra: dict = field(default_factory=dict)   # more KafkaConsumer settings (tests)


# The interpreter with pyarrow, DuckDB and kafka-python loaded, their threads and caches,
# before any batch (measured idle: ~190 MiB), with room for the string-id and inventory
# caches of a fleet's names.
BASE_RSS_BYTES = 320 << 20
# raw_slice_tail's rows held in memory (< ROW_GROUP_ROWS rows of ~170 bytes decoded)
HELD_SLICE_BYTES = 24 << 20


def memory_bound(cfg: IngestConfig, duckdb_memory_bytes: int) -> int:
    """The peak RSS ingest stays under whatever the topic holds (docs/ingest.md, Memory):
    the base, DuckDB's limit, Kafka's fetch buffers (the fetched records and their copy
    as Python bytes), one poll's decompressed record batches and their records' copy (at
    most the poll's budget plus the one batch that crossed it, ingest/kafka_batches.py),
    three batches (the one being filled, the one prepared, the one
    being written), each at most `batch_bytes` plus the one message that crossed it,
    itself at most slicemeter.tick.MAX_DECODED_BYTES; the held-back slice rows."""
    batch = cfg.batch_bytes + MAX_DECODED_BYTES
    decompressed = kafka_batches.POLL_DECOMPRESSED_BYTES + kafka_batches.MAX_BATCH_BYTES
    return (BASE_RSS_BYTES + duckdb_memory_bytes + 2 * cfg.fetch_max_bytes + 2 * decompressed + 3 * batch
            + HELD_SLICE_BYTES)


class _Rebalance(ConsumerRebalanceListener):
    def __init__(self, ingestor: "Ingestor"):
        self.ingestor = ingestor

    def on_partitions_revoked(self, revoked):
        # Store what we hold before another worker takes the partitions over.
        self.ingestor.flush()
        self.ingestor.release(revoked)

    def on_partitions_assigned(self, assigned):
        self.ingestor.assigned(assigned)


class Ingestor:
    def __init__(self, cfg: IngestConfig, metrics: IngestMetrics | None = None,
                 con: duckdb.DuckDBPyConnection | None = None):
        kafka_batches.install()   # before any consumer: refuses to start without the internals it needs
        self.cfg = cfg
        self.metrics = metrics or IngestMetrics()
        self.con = con or store.connect(cfg.db, upgrade=True, memory_limit=cfg.duckdb_memory)
        configure_writes(self.con, cfg.duckdb_memory)
        # a DuckLake shared by the workers of the group (store/lake.py): string ids every
        # worker derives alike, appends only, no slice rows held back, no retention pass
        self.lake = lake.is_lake_connection(self.con)
        self.strings = (HashedStringIds if self.lake else StringIds)(self.con)
        self.inventory = InventoryCache(self.con)
        # the slice rows raw_slice_tail holds once the batches handed over are stored: the
        # next batch starts with them (writer.prepare), and batches close where these and
        # theirs fill whole row groups (writer.batch_full)
        self.held_slices = held_slice_table(self.con)
        # batches whose rollup deltas wait in the store's *_pending tables (store.connect
        # folded those of earlier runs): folded every fold_every_batches and at every flush
        self.unfolded_batches = 0
        self.batch = Batch()
        self.batch_started = 0.0
        self.consumer: KafkaConsumer | None = None
        self.samples_written = 0
        self.first_record_at: float | None = None
        self.last_flush_at: float | None = None
        self.stopping = False
        self._next: dict[int, int] = {}  # partition -> next offset we will read
        # (topic, partition) -> end of a batch the store rejected: up to there, every message
        # is a batch of its own (_recover_rejected)
        self._one_by_one: dict[tuple[str, int], int] = {}
        self._seeks = 0                  # bumped by every seek back: records polled before are stale
        self._hw_at_seek: dict[int, int | None] = {}   # partition -> its high watermark when last sought
        # (topic, partition) -> (offset, digest) of the record just below a stored offset: a
        # partition resumes one record early and that record must be the one stored (the log
        # is the same one); see _check_resume
        self._verify: dict[tuple[str, int], tuple[int, bytes]] = {}
        self.bindings = Bindings(self.con)
        self.instants = RecentInstants(self.con, int(cfg.dedupe_window_s * 1000))
        # (topic, partition, offset, error) of every message the store rejected in this run
        self.store_rejected: list[tuple[str, int, int, str]] = []
        # (topic, partition, first, last) offsets gone from the log before ingest read them
        self.records_gone: list[tuple[str, int, int, int]] = []
        self._others_checked_at = float("-inf")
        self._lock = threading.RLock()
        # on a lake, the partitions this worker took and their epochs (docs/lake.md,
        # Fencing): its batches are stored only while they are the partitions' latest
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.epochs: dict[tuple[str, int], int] = {}
        self.fenced_out = False          # fenced without a group: the worker stops, exit 1
        self.writer = BatchWriterThread(self.con, write_lake if self.lake else None)

    # ---- Kafka side -------------------------------------------------------------------
    def _consumer(self) -> KafkaConsumer:
        c = self.cfg
        return KafkaConsumer(
            bootstrap_servers=c.bootstrap, group_id=c.group, client_id=c.client_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            max_poll_records=c.max_poll_records, max_partition_fetch_bytes=c.max_partition_fetch_bytes,
            fetch_max_bytes=c.fetch_max_bytes, session_timeout_ms=c.session_timeout_ms,
            heartbeat_interval_ms=c.heartbeat_interval_ms, **c.kafka_security, **c.extra,
            **({"group_instance_id": c.group_instance_id} if c.group and c.group_instance_id else {}),
        )

    def assigned(self, partitions) -> None:
        """Partitions given to this worker: on a lake taken first (a new epoch each, which
        fences whoever stored them before), then positioned at the stored offsets."""
        partitions = list(partitions)
        if self.lake and partitions:
            self.consumer.resume(*partitions)   # a partition fenced before is this worker's again
            taken = take_partitions(self.con, self.cfg.topic, sorted(tp.partition for tp in partitions), self.owner)
            self.epochs.update({(self.cfg.topic, p): e for p, e in taken.items()})
            log.info("took partitions %s at epochs %s as %s", sorted(taken), [taken[p] for p in sorted(taken)],
                     self.owner)
        self.seek(partitions)

    def release(self, partitions) -> None:
        """Partitions taken from this worker by the group (stored up to here: flushed)."""
        for tp in partitions:
            self.epochs.pop((tp.topic, tp.partition), None)

    def seek(self, partitions) -> None:
        """Position each partition at the offset stored in DuckDB (the source of truth);
        on a lake, only those this worker holds (a fenced one waits for the group)."""
        if self.lake:
            partitions = [tp for tp in partitions if (tp.topic, tp.partition) in self.epochs]
        positions = stored_positions(self.con, self.cfg.topic)
        stored = {p: o for p, (o, _) in positions.items()}
        for tp in partitions:
            # the high watermark known now may predate offsets another worker stored since
            # (a lake): _check_high_watermarks waits for a fetch's newer one
            self._hw_at_seek[tp.partition] = self.consumer.highwater(tp)
            if tp.partition in stored:
                offset, digest = positions[tp.partition]
                if offset > 0 and digest is not None:
                    self._verify[(tp.topic, tp.partition)] = (offset - 1, digest)
                    self.consumer.seek(tp, offset - 1)
                else:
                    self._verify.pop((tp.topic, tp.partition), None)
                    self.consumer.seek(tp, offset)
                self._next[tp.partition] = offset
                continue
            # No stored offset: a new store, or a partition handed over by another worker
            # of the group. In a group the client itself starts from the group's committed
            # offset, else 'earliest' (this runs on kafka-python's IO thread, where a
            # blocking committed() call is not allowed); without a group, the start.
            if not self.cfg.group:
                self.consumer.seek_to_beginning(tp)
                self._next[tp.partition] = 0
        log.info("assigned partitions %s, stored offsets %s", sorted(tp.partition for tp in partitions), stored)

    def _assign_all(self, deadline_s: float = 30.0) -> None:
        deadline = time.monotonic() + deadline_s
        while (parts := self.consumer.partitions_for_topic(self.cfg.topic)) is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"topic {self.cfg.topic!r} has no partitions after {deadline_s:.0f} s")
            self.consumer.poll(timeout_ms=100)
        tps = [TopicPartition(self.cfg.topic, p) for p in sorted(parts)]
        self.consumer.assign(tps)
        self.assigned(tps)

    # ---- batching ---------------------------------------------------------------------
    def add(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
            headers=()) -> None:
        refused = value if isinstance(value, RefusedBatch) else None   # a record batch that could not be read
        if refused:
            value = refused.identity
        if self.lake and (topic, partition) not in self.epochs:
            return   # fetched before this worker was fenced from the partition
        if self._check_resume(topic, partition, offset, key, value, refused.first_offset if refused else offset):
            return
        b = self.batch
        if not b:
            self.batch_started = time.monotonic()
        try:
            reason = refused.describe(partition) if refused else self._refusal(value, headers)
        except TickDecodeError as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 - any undecodable message costs only itself
            reason = f"undecodable: {exc!r}"
        if refused:
            b.add_dead(dead_letter(topic, partition, refused.first_offset, key, refused.payload, reason))
        elif isinstance(reason, str):
            b.add_dead(dead_letter(topic, partition, offset, key, value, reason))
        else:
            b.add_tables(reason)
            if self._one_by_one:
                b.source = (topic, partition, offset, key, value)
        b.messages += 1
        b.first_offsets.setdefault((topic, partition), offset)
        b.next_offsets[(topic, partition)] = offset + 1
        b.last_records[(topic, partition)] = (key, value)
        self._next[partition] = offset + 1
        if self._one_by_one.get((topic, partition), -1) <= offset + 1:
            self._one_by_one.pop((topic, partition), None)

    def _refusal(self, value: bytes | None, headers) -> str | TickBatch:
        """The decoded message, or why it is refused (docs/security.md: signature, the
        clusters its key may speak for, bindings, duplicates; one by one also every
        impossible value, which `submit` checks batch-wide)."""
        if value is None:
            raise TickDecodeError("empty message (null value)")
        publisher = None
        if self.cfg.publishers is not None:
            publisher, why = verify(self.cfg.publishers, headers, value)
            if why:
                return why
        tick = decode(value)
        if self._one_by_one and (why := implausible(tick, self.cfg.limits, self.cfg.clock_ms())):
            return why
        return (repeated_key(tick) or self.bindings.check(tick, publisher)
                or self.instants.check(tick, ask_store=bool(self._one_by_one)) or tick)

    # ---- the broker's log against the stored offsets -------------------------------------
    def _check_resume(self, topic: str, partition: int, offset: int, key, value, first: int) -> bool:
        """True for the record below a stored offset when it is the one stored (resumed
        from it: skip it). Any other first record, or one out of sequence, means the log is
        not the one the stored offset counts in: see _log_mismatch. `first` is the first
        offset the record stands for: a refused record batch arrives as one record at its
        last offset, and the offsets below it in the batch are not a gap."""
        expected = self._verify.pop((topic, partition), None)
        if expected is not None:
            at, digest = expected
            if offset == at and record_digest(key, value) == digest:
                return True
            if offset <= at:
                self._log_mismatch(topic, partition, "the record below the stored offset differs: "
                                   "the broker's log was replaced")
                return True
            if first > at + 1:
                self._log_event(topic, partition, at + 1, first, f"log starts at {first}, past the stored offset "
                                f"{at + 1}: {first - at - 1} message(s) were deleted before ingest read them")
            return False
        nxt = self._next.get(partition)
        if nxt is not None and offset < nxt:
            # the client reset its position (the broker answered 'offset out of range')
            self._log_mismatch(topic, partition, f"the log restarted below the stored offset {nxt}")
            return True
        if nxt is not None and first > nxt:
            self._log_event(topic, partition, nxt, first, f"offsets {nxt}..{first - 1} are gone from the log")
        return False

    def _log_mismatch(self, topic: str, partition: int, reason: str, high_watermark: int | None = None) -> None:
        """A stored offset the broker's log does not hold: the log was lost (a replaced
        broker starts again at 0). Policy (docs/ingest.md): read the partition again from
        its log start. Every record there is newer than the lost log's, and a Tick stored
        already comes back as a duplicate dead letter (ingest/trust.py)."""
        tp = TopicPartition(topic, partition)
        with self._lock:
            self.flush()
            if self.lake and (topic, partition) not in self.epochs:
                return   # fenced meanwhile: the partition is another worker's now
            start = self.consumer.beginning_offsets([tp]).get(tp, 0)
            stored = stored_positions(self.con, topic).get(partition, (None, None))[0]
            log.error("partition %s/%d: %s (stored offset %s, log start %s, high watermark %s); "
                      "reading it again from %d", topic, partition, reason, stored, start, high_watermark, start)
            try:
                reset_offset(self.con, topic, partition, start, stored, start, high_watermark, reason,
                             **({"script": "lake/reset_offset.sql",
                                 "owners": owners_table(self.owner, self.epochs, [(topic, partition)])}
                                if self.lake else {}))
            except LakeCommitLost as lost:
                self._lost(lost)
                return
            self.metrics.offset_resets.labels(partition=str(partition), reason="log_replaced").inc()
            self._verify.pop((topic, partition), None)
            self._seeks += 1
            self._seek_back()

    def _log_event(self, topic: str, partition: int, first: int, offset: int, reason: str) -> None:
        """Records `first`..`offset`-1 that ingest never read are gone (the log start moved
        past them, e.g. a store restored from a backup older than the topic's retention):
        nothing can bring them back; said and counted, ingest goes on, and a drain exits 1."""
        log.error("partition %s/%d: %s; continuing at %d", topic, partition, reason, offset)
        self.records_gone.append((topic, partition, first, offset - 1))
        self.metrics.offset_resets.labels(partition=str(partition), reason="records_gone").inc()

    def _check_high_watermarks(self) -> None:
        """Tansu answers a fetch past its log with no records and its high watermark (Kafka
        with 'offset out of range', which the client turns into a reset: _check_resume)."""
        for tp in list(self.consumer.assignment()):
            hw = self.consumer.highwater(tp)
            wanted = self._next.get(tp.partition)
            if self.lake and ((tp.topic, tp.partition) not in self.epochs or hw == self._hw_at_seek.get(tp.partition)):
                continue   # not this worker's, or no fetch answered since the seek (an older figure)
            if hw is not None and wanted is not None and hw < wanted:
                self._log_mismatch(tp.topic, tp.partition, f"the log ends at {hw}, below the stored offset {wanted}",
                                   high_watermark=hw)

    def batch_full(self) -> bool:
        b = self.batch
        return bool(b) and (b.full(self.cfg.batch_samples, self.held_slices.num_rows) or b.source is not None
                            or b.decoded_bytes >= self.cfg.batch_bytes)

    def batch_due(self) -> bool:
        return bool(self.batch) and (self.batch_full()
                                     or time.monotonic() - self.batch_started >= self.cfg.batch_max_s)

    def flush(self) -> None:
        """Hand the current batch to the writer thread and wait until it is stored.

        Also called by the rebalance listener (on kafka-python's IO thread) before
        partitions move to another worker."""
        with self._lock:
            self.submit(fold=True)
            self.drain()

    def submit(self, fold: bool = False) -> None:
        """Prepare the current batch (while the writer stores the previous one) and hand it
        over; blocks while the previous one is being stored. `fold`: fold every pending
        rollup delta in its transaction, even with no batch in hand."""
        with self._lock:
            b = self.batch
            if not b:
                if fold and self.unfolded_batches and self.writer.put(fold_only()):
                    self.unfolded_batches = 0
                return
            self.batch = Batch()
            b.seal()
            if b.source is None and b.gpus and (why := self._implausible(b)):
                log.warning("batch refused (%s); its %d messages are read again one by one", why, b.messages)
                self.writer.drain()
                self._recover_rejected(b.next_offsets, b.first_offsets)
                return
            b.bindings = self.bindings.take_pending()
            started = time.perf_counter()
            try:
                prepared = prepare(self.con, b, self.strings, self.inventory, self.held_slices)
                log.debug("prepared batch: %d samples, %d messages, %.3f s", b.samples, b.messages,
                          time.perf_counter() - started)
            except (duckdb.Error, pa.ArrowException) as exc:
                # say, a timestamp no store can bucket
                if b.source is None:
                    log.warning("batch rejected (%s); its %d messages are read again one by one", exc, b.messages)
                    self.writer.drain()
                    self._recover_rejected(b.next_offsets, b.first_offsets)
                    return
                prepared = rejected_message(b, exc, self.strings.take_pending())
            # before the writer drops the rows; a lake stores them all
            held = self.held_slices if self.lake else held_after(prepared, self.held_slices)
            prepared.fold_rollups = fold or self.unfolded_batches + 1 >= self.cfg.fold_every_batches
            if self.lake:
                prepared.owner, prepared.epochs = self.owner, dict(self.epochs)
            if not self.writer.put(prepared):
                # dropped with the batch before it: read again from its first records too
                self._recover_rejected(starts=b.first_offsets)
                return
            self.held_slices = held
            self.unfolded_batches = 0 if prepared.fold_rollups else self.unfolded_batches + 1
            if prepared.source is not None:
                # a one-message batch the store rejects becomes a dead letter without its
                # rows: what is held back is known once it is stored (a rare path: no overlap)
                self.drain()
                self.held_slices = held_slice_table(self.con)
            elif not self.cfg.overlap:
                self.drain()

    def _implausible(self, b: Batch) -> str | None:
        """The first impossible value in a whole batch (one check for all its messages: the
        rare batch that has one is read again one message at a time, see _refusal)."""
        try:
            whole = TickBatch(gpus=pa.concat_tables(b.gpus), slices=pa.concat_tables(b.slices), minor=0)
            return implausible(whole, self.cfg.limits, self.cfg.clock_ms())
        except Exception as exc:  # noqa: BLE001 - one by one, the message that raises is a dead letter
            return f"checking the batch raised {exc!r}"

    def drain(self) -> None:
        """Wait until every handed-over batch is stored (or a rejected one dealt with)."""
        with self._lock:
            self.writer.drain()
            self._recover_rejected()

    def _recover_rejected(self, ends: dict[tuple[str, int], int] | None = None,
                          starts: dict[tuple[str, int], int] | None = None) -> None:
        """A batch the store rejected (or `ends`, one that could not be prepared): read its
        messages again from Kafka as one-message batches, where a message the store rejects
        becomes a dead letter and the rest is stored.

        What was read after it is dropped, the string-id and inventory caches are reloaded
        (they may hold what never reached the store) and every partition goes back to the
        offset DuckDB holds: the same path a restart takes, so exactly-once is unchanged."""
        if self.writer.has_lost():
            self._recover_lost(starts)
            if ends is None:
                return
        rejected = self.writer.take_rejected() if self.writer.has_rejected() else None
        if rejected is None and ends is None:
            return
        ends, starts = dict(ends or {}), dict(starts or {})
        for tp, start in self.batch.first_offsets.items():   # the batch being filled is dropped too
            starts[tp] = min(start, starts.get(tp, start))
        for tp, end in (rejected.next_offsets.items() if rejected else ()):
            ends[tp] = max(end, ends.get(tp, end))
        for tp, start in (rejected.first_offsets.items() if rejected else ()):
            starts[tp] = min(start, starts.get(tp, start))
        self.batch = Batch()
        if rejected is not None and rejected.fold_rollups and not self.lake and has_pending_rollups(self.con):
            # it was to fold earlier batches' deltas: the next flush folds them (a readers'
            # copy refuses a store with deltas pending)
            self.unfolded_batches = max(self.unfolded_batches, 1)
        self._reload_caches()
        self._one_by_one = dict(ends)
        self._seeks += 1
        self._seek_back(starts)

    def _recover_lost(self, starts: dict[tuple[str, int], int] | None = None) -> None:
        """Batches the lake did not store for ownership (writer.LakeCommitLost): dropped with
        what was read after them, the caches reloaded, and every partition this worker still
        holds read again from the stored offsets, or, with none stored yet, from the first
        record dropped (`starts`: of a batch dropped beside the lost one). Partitions another
        worker took are given up (logged, counted): without a group the worker stops, in a
        group they wait (paused) for the group to assign them again."""
        self._lost(self.writer.take_lost(), starts)

    def _lost(self, lost, starts: dict[tuple[str, int], int] | None = None) -> None:
        """See _recover_lost; also for an offset reset the lake refused (_log_mismatch)."""
        dropped = dict(starts or {})
        for tp, start in [*lost.first_offsets.items(), *self.batch.first_offsets.items()]:
            dropped[tp] = min(start, dropped.get(tp, start))
        self.batch = Batch()
        self._seeks += 1
        if lost.fenced:
            for p, (owner, epoch) in lost.fenced.items():
                log.error("fenced: partition %s/%d is stored by %s at epoch %s now, no longer by this worker "
                          "(%s, epoch %s; %s); the batches read from it and not stored are dropped",
                          self.cfg.topic, p, owner, epoch, self.owner, self.epochs.get((self.cfg.topic, p)),
                          lost.reason)
            self.metrics.fenced.inc(len(lost.fenced))
            # another worker took some: the others may follow (a group that rebalanced while
            # this worker was paused), so it gives up every one and stores nothing more until
            # the group assigns it partitions again, or stops
            held = [TopicPartition(t, p) for t, p in self.epochs]
            self.epochs.clear()
            if not self.cfg.group:
                log.error("fenced: another worker stores this topic now; stopping")
                self.fenced_out = self.stopping = True
                return
            # a partition given back to this worker keeps its client position: with no stored
            # offset to seek to then, that position must be the first record not stored
            self._rewind_unstored(self.consumer.assignment(), dropped)
            self.consumer.pause(*held)
            # and asks the group for a new assignment: one that did not rebalance (a take-over
            # of an older generation's assignment, committed late) would leave them unread
            self.consumer._coordinator.request_rejoin()
            log.error("fenced: partitions %s given up; rejoining the group for a new assignment",
                      sorted(tp.partition for tp in held))
            self._reload_caches()
            return
        log.warning("the lake refused a batch for a concurrent commit (%s); its partitions are still this "
                    "worker's and are read again from the stored offsets", lost.reason)
        self._reload_caches()
        self._seek_back(dropped)

    def _reload_caches(self) -> None:
        """The caches a dropped batch may have filled with what never reached the store."""
        self.strings.reload()
        self.inventory = InventoryCache(self.con)
        self.held_slices = held_slice_table(self.con)
        self.bindings = Bindings(self.con)
        self.instants = RecentInstants(self.con, int(self.cfg.dedupe_window_s * 1000))

    def _seek_back(self, starts: dict[tuple[str, int], int] | None = None) -> None:
        """Every assigned partition back to the offset DuckDB holds; one it holds none for
        (it started at the group's committed offset or the log start) back to the first
        record not stored: `starts` (of batches dropped unstored), else the next unread."""
        assigned = self.consumer.assignment() if self.consumer is not None else []
        self.seek(assigned)
        self._rewind_unstored(assigned, starts)

    def _rewind_unstored(self, partitions, starts: dict[tuple[str, int], int] | None) -> None:
        """Each of `partitions` the store holds no offset for back to the first record not
        stored: `starts`, else the next unread (the client's position may be past both)."""
        stored = stored_positions(self.con, self.cfg.topic)
        for tp in partitions:
            if tp.partition in stored:
                continue
            candidates = [o for o in ((starts or {}).get((tp.topic, tp.partition)), self._next.get(tp.partition))
                          if o is not None]
            if candidates:
                self.consumer.seek(tp, min(candidates))
                self._next[tp.partition] = min(candidates)

    def _finish(self) -> None:
        """Main thread: account for stored batches and commit their offsets to Kafka."""
        for b, seconds, dead in self.writer.finished():
            self.samples_written += b.samples
            self.metrics.samples.inc(b.samples)
            self.metrics.dead_letters.inc(dead)
            self.metrics.batch_seconds.observe(seconds)
            self.last_flush_at = time.monotonic()
            if b.store_rejected:
                self.store_rejected.append(b.store_rejected)
            if self.consumer is not None and self.cfg.group and b.next_offsets:
                offsets = {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in b.next_offsets.items()}
                try:
                    self.consumer.commit_async(offsets=offsets)
                except Exception as exc:  # noqa: BLE001 - secondary: DuckDB holds the truth
                    log.warning("Kafka commit failed (offsets are safe in DuckDB): %s", exc)

    # ---- draining (--until-idle) --------------------------------------------------------
    def _caught_up(self) -> bool:
        """Every partition of the topic stored up to its high watermark: this worker's own
        by its reading position, the others' (checked at most once a second) by the store
        or the group's commits (see unstored)."""
        assigned = self.consumer.assignment()
        if not assigned or self.first_record_at is None:  # an empty topic ends by the idle timeout
            return False
        for tp in assigned:
            hw = self.consumer.highwater(tp)
            if hw is None or self._next.get(tp.partition, 0) < hw:
                return False
        parts = self._topic_partitions()
        if not parts:
            return False
        if len(assigned) == len(parts):
            return True
        if time.monotonic() - self._others_checked_at < 1.0:
            return False
        self._others_checked_at = time.monotonic()
        return self.unstored() == []

    def _topic_partitions(self) -> set[int]:
        """The topic's partitions: empty where the broker's metadata did not name them, which
        a loaded broker's answer may not (taken for a topic without partitions, it would end
        a drain with other members' partitions unchecked)."""
        return set(self.consumer.partitions_for_topic(self.cfg.topic) or ())

    def _held_by_others(self) -> list[int] | None:
        """The topic's partitions this worker does not hold (none without a group); None
        while the broker's metadata names none."""
        if not self.cfg.group:
            return []
        parts = self._topic_partitions()
        if not parts:
            return None
        return sorted(parts - {tp.partition for tp in self.consumer.assignment()})

    def _drain_wait_s(self) -> float:
        """How long an idle drain waits for other members' partitions: by default twice the
        session timeout (a dead member's session ends, then the group rebalances, which on
        Tansu takes about half a session timeout more: docs/operations.md)."""
        if self.cfg.drain_wait_s is not None:
            return self.cfg.drain_wait_s
        return 2 * self.cfg.session_timeout_ms / 1000

    def unstored(self) -> list[tuple[int, int, int | None]] | None:
        """(partition, offset stored up to, high watermark or None where the broker did not
        tell) of every partition of the topic with records not stored; None where the
        broker's metadata named no partition of the topic. A partition this worker holds
        counts from its reading position (call between batches); any other from the
        store's offset or the group's commit, whichever is further: a worker of the group
        commits only what its store holds, while one that died holds its partitions,
        uncommitted, until its session times out."""
        parts = self._topic_partitions()
        if not parts:
            return None
        assigned = {tp.partition for tp in self.consumer.assignment()}
        stored = stored_offsets(self.con, self.cfg.topic)
        upto, high = {}, {}
        for p in sorted(parts):
            tp = TopicPartition(self.cfg.topic, p)
            if p in assigned and p in self._next:
                upto[p] = self._next[p]
                if (hw := self.consumer.highwater(tp)) is not None:
                    high[p] = hw
            else:
                committed = self.consumer.committed(tp) if self.cfg.group else None
                upto[p] = max(stored.get(p, 0), committed or 0)
        unknown = {p: o for p, o in upto.items() if p not in high}
        if unknown:
            high.update(self._high_watermarks(unknown))
        return [(p, o, high.get(p)) for p, o in upto.items() if high.get(p) is None or o < high[p]]

    def _high_watermarks(self, positions: dict[int, int], deadline_s: float = 15.0) -> dict[int, int]:
        """partition -> high watermark, from fetches at `positions` by a consumer outside
        the group (a fetch's answer carries it; Tansu gets end_offsets wrong). One record
        batch per partition at most comes back, and is dropped."""
        c = self.cfg
        probe = KafkaConsumer(bootstrap_servers=c.bootstrap, group_id=None, client_id=c.client_id + "-drain",
                              enable_auto_commit=False, auto_offset_reset="earliest",
                              max_partition_fetch_bytes=1, fetch_max_bytes=1, **c.kafka_security)
        try:
            tps = [TopicPartition(c.topic, p) for p in positions]
            probe.assign(tps)
            for tp in tps:
                probe.seek(tp, positions[tp.partition])
            deadline = time.monotonic() + deadline_s
            high: dict[int, int] = {}
            while len(high) < len(tps) and time.monotonic() < deadline:
                probe.poll(timeout_ms=200)
                high = {tp.partition: hw for tp in tps if (hw := probe.highwater(tp)) is not None}
            return high
        finally:
            probe.close()

    def drain_result(self) -> int:
        """--until-idle's exit status: 0 when every partition of the topic is stored up to
        its high watermark and the store rejected nothing; else what is left is logged, 1."""
        left = self.unstored()
        if left is None:
            log.error("drain incomplete: the broker's metadata names no partition of %s, so what is stored "
                      "cannot be checked", self.cfg.topic)
            return 1
        for p, upto, hw in left:
            log.error("drain incomplete: partition %s/%d stored up to offset %d of %s", self.cfg.topic, p, upto,
                      "an unknown high watermark" if hw is None else hw)
        for topic, partition, offset, error in self.store_rejected:
            log.error("drain incomplete: the store rejected %s/%d offset %d (kept as a dead letter): %s",
                      topic, partition, offset, error)
        for topic, partition, first, last in self.records_gone:
            log.error("drain incomplete: partition %s/%d offsets %d..%d are gone from Kafka (deleted before ingest "
                      "read them: a restored backup older than the topic's retention?)", topic, partition, first, last)
        if left or self.store_rejected or self.records_gone:
            log.error("drain incomplete: %d partition(s) not stored to their end, %d message(s) rejected by the store, "
                      "%d range(s) gone from Kafka", len(left), len(self.store_rejected), len(self.records_gone))
            return 1
        return 0

    # ---- main loop --------------------------------------------------------------------

    def _update_lag(self) -> None:
        for tp in self.consumer.assignment():
            hw = self.consumer.highwater(tp)
            if hw is not None:
                self.metrics.lag.labels(partition=str(tp.partition)).set(max(0, hw - self._next.get(tp.partition, 0)))

    def active_seconds(self) -> float:
        """From the first record received to the last batch committed (bench figure)."""
        if self.first_record_at is None or self.last_flush_at is None:
            return 0.0
        return self.last_flush_at - self.first_record_at

    def run(self) -> int:
        cfg = self.cfg
        self.consumer = self._consumer()
        if cfg.group:
            self.consumer.subscribe([cfg.topic], listener=_Rebalance(self))
        else:
            self._assign_all()
        last_record = time.monotonic()
        held: set[TopicPartition] = set()
        waiting_since = None   # a drain idle, waiting for partitions other members hold
        last_snapshot = last_retention = time.monotonic()
        reader = ReaderFile(self.con, cfg.snapshot) if cfg.snapshot else None
        backups = None if self.lake else BackupServer(self.con, Path(cfg.db))
        last_backup_look = time.monotonic()
        try:
            while not self.stopping:
                kafka_batches.start_poll()
                polled = self.consumer.poll(timeout_ms=100 if self.batch else 500)
                with self._lock:
                    seeks = self._seeks
                    for tp, records in polled.items():   # where to come back to if these are dropped
                        if records:
                            self._next.setdefault(tp.partition, records[0].offset)
                    for r in (r for records in polled.values() for r in records):
                        if self._seeks != seeks:
                            break  # went back to the stored offsets: these records come again
                        self.add(r.topic, r.partition, r.offset, r.key, r.value, r.headers)
                        if self.batch_full():  # one fetch may hold many batches
                            self.submit()
                if polled:
                    last_record = time.monotonic()
                    if self.first_record_at is None:
                        self.first_record_at = last_record
                        log.debug("first records received")
                quiet = not polled and self.writer.idle()
                if self.batch_due() or (quiet and (self.batch or self.unfolded_batches)):
                    # the writer stores it while we fetch and decode the next one; once the
                    # stream pauses, the rollups catch up
                    self.submit(fold=quiet)
                self.writer.check()
                self._recover_rejected()
                self._finish()
                if self.stopping:
                    break
                self._check_high_watermarks()
                self._update_lag()
                now = time.monotonic()
                if not self.lake and now - last_retention >= cfg.retention_every_s:
                    self.flush()
                    apply_retention(self.con, cfg.raw_retention_days, accepted_age_ms=cfg.limits.max_age_ms)
                    self.held_slices = held_slice_table(self.con)  # it may have deleted held rows
                    last_retention = now
                if reader and now - last_snapshot >= cfg.snapshot_interval_s and not reader.busy():
                    with self._lock:  # no batch (a rebalance's flush) between the fold and the pin
                        self.flush()  # folds the rollup deltas; the copy then runs beside ingest
                        reader.start()
                    last_snapshot = now
                if backups and now - last_backup_look >= 1.0:
                    backups.poll()   # `slicemeter backup` asks for a copy (store/backup.py)
                    last_backup_look = now
                if not polled and not self.consumer.assignment():
                    last_record = now  # still joining the group: not idle yet
                if self.consumer.assignment() != held:
                    held = set(self.consumer.assignment())
                    last_record = now  # partitions handed over (a dead worker's too): idle from here
                    waiting_since = None
                if cfg.until_idle_s is not None and not self.batch and not polled and self.writer.idle():
                    if self._caught_up():
                        break
                    if now - last_record >= cfg.until_idle_s:
                        # idle counts only while this drain holds every partition: others
                        # may be held by a dead member until its session times out
                        others = self._held_by_others()
                        if others == []:
                            break
                        others = "(none named by the broker's metadata yet)" if others is None else others
                        if waiting_since is None:
                            waiting_since = now
                            log.warning("drain idle, waiting up to %.0f s for partitions %s held by other members "
                                        "(a dead member's come to this drain when its session times out)",
                                        self._drain_wait_s(), others)
                        elif now - waiting_since >= self._drain_wait_s():
                            log.error("drain: partitions %s still held by other members after %.0f s",
                                      others, now - waiting_since)
                            break
            self.flush()
            self._finish()
            if reader:
                with self._lock:
                    self.flush()
                    reader.refresh()
            if self.fenced_out:
                return 1
            if cfg.until_idle_s is not None:
                return self.drain_result()
        finally:
            if reader:
                reader.join()
            if backups:
                backups.join()
            self.writer.stop()
            self.consumer.close(autocommit=False)
        return 0
