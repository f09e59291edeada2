"""Shared by the ingest tests and bench/bench_ingest.py: topic setup, producing Tick
messages, an order-independent checksum of stored samples, and polling for a background result."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

from slicemeter import store
from slicemeter.simulator.backfill import bulk_producer
from slicemeter.tick import encode_tables

TOPIC = "slicemeter.ticks"


def create_topic(bootstrap: str, topic: str = TOPIC, partitions: int = 4, deadline_s: float = 20.0) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        deadline = time.monotonic() + deadline_s
        while topic not in admin.list_topics():
            assert time.monotonic() < deadline, f"topic {topic} did not appear"
    finally:
        admin.close()


def producer(bootstrap: str) -> KafkaProducer:
    return bulk_producer(bootstrap)


def produce_chunks(bootstrap: str, chunks, topic: str = TOPIC) -> tuple[int, int]:
    """Publish (node, gpu_table, slice_table) chunks keyed by node; returns (messages, samples)."""
    p = producer(bootstrap)
    messages = samples = 0
    for node, gpus, slices in chunks:
        p.send(topic, key=node.encode(), value=encode_tables(gpus, slices))
        messages += 1
        samples += gpus.num_rows + slices.num_rows
    p.flush()
    p.close()
    return messages, samples


def produce_raw(bootstrap: str, records, topic: str = TOPIC, partition: int | None = None) -> None:
    """(key, value) or (key, value, headers) records, in order (on `partition` if given)."""
    p = producer(bootstrap)
    for key, value, *headers in records:
        p.send(topic, key=key, value=value, headers=headers[0] if headers else None, partition=partition)
    p.flush()
    p.close()


# The CLI as a child process. Not `python -m slicemeter.cli`: run as __main__ that module's
# ConfigError would be a second class, and config errors would not map to exit code 2.
SLICEMETER = [sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())"]


def stored_checksum(db: Path) -> tuple[int, int]:
    """Count and checksum of the samples a store file holds (ingest has exited)."""
    con = store.connect(db, read_only=True)
    try:
        return con.execute(store.sql_text("testkit/sample_checksum.sql")).fetchone()
    finally:
        con.close()


def rollup_samples(con) -> int:
    """Samples the hour rollups count (what a reader file can show of the stored samples)."""
    from slicemeter.store import sql_text

    return int(con.execute(sql_text("testkit/rollup_samples.sql")).fetchone()[0])
def store_ticks(con, ticks, offset: int = 0) -> None:
    """Ticks through the wire encoding into the store, as one ingest batch."""
    from slicemeter.ingest.strings import StringIds
    from slicemeter.ingest.writer import Batch, write_batch
    from slicemeter.tick import decode, encode_ticks

    tb = decode(encode_ticks(ticks))
    write_batch(con, Batch(gpus=[tb.gpus], slices=[tb.slices], samples=tb.sample_count,
                           slice_rows=tb.slices.num_rows, next_offsets={("t", 0): offset}), StringIds(con))


def an_hour_of(tick, cluster: str) -> list:
    """The same Tick every minute of its hour, sent for `cluster` (a tenant's API server)."""
    import dataclasses

    hour_ms = tick.ts_ms - tick.ts_ms % 3_600_000
    return [dataclasses.replace(tick, cluster=cluster, ts_ms=hour_ms + i * 60_000, interval_ms=60_000)
            for i in range(60)]


class StoreWriter:
    """Batches into a store of either backend as one ingest worker stores them: a file's
    `write_batch`, or a lake's `write_lake` with hashed string ids (tests of what every
    store must do alike: tests/conftest.py any_store)."""

    def __init__(self, con):
        from slicemeter.ingest.strings import HashedStringIds, StringIds
        from slicemeter.store.lake import is_lake_connection

        self.con, self.lake = con, is_lake_connection(con)
        self.strings = (HashedStringIds if self.lake else StringIds)(con)

    def write(self, batch) -> None:
        from slicemeter.ingest.writer import InventoryCache, prepare, write_batch, write_lake

        if self.lake:
            write_lake(self.con, prepare(self.con, batch, self.strings, InventoryCache(self.con)))
        else:
            write_batch(self.con, batch, self.strings)


def _plain(table: pa.Table) -> pa.Table:
    return pa.table({n: pc.dictionary_decode(c) if pa.types.is_dictionary(c.type) else c
                     for n, c in zip(table.column_names, table.columns)})


def expected_checksum(chunks) -> tuple[int, int]:
    """Count and checksum of the produced samples, by the same SQL the store is checked with."""
    con = duckdb.connect()
    raw_gpu = pa.concat_tables([_plain(g) for _, g, _ in chunks])  # noqa: F841 (scanned by DuckDB)
    raw_slice = pa.concat_tables([_plain(s) for _, _, s in chunks])  # noqa: F841
    con.execute("CREATE TABLE raw_gpu AS SELECT * FROM raw_gpu")
    con.execute("CREATE TABLE raw_slice AS SELECT * FROM raw_slice")
    return con.execute(store.sql_text("testkit/sample_checksum.sql")).fetchone()


def wait_for_line(proc: subprocess.Popen, log: Path, text: str, count: int, deadline_s: float = 60) -> bool:
    """Poll the child's log until `text` appeared `count` times; False if the child exited."""
    deadline = time.monotonic() + deadline_s
    while log.read_text().count(text) < count:
        assert time.monotonic() < deadline, f"no {text!r} x{count} in {deadline_s} s:\n{log.read_text()[-2000:]}"
        try:
            proc.wait(timeout=0.05)
            return False
        except subprocess.TimeoutExpired:
            pass
    return True


def sigkill_within(proc: subprocess.Popen, seconds: float) -> bool:
    """SIGKILL `proc` unless it exits within `seconds`; True if it was killed."""
    try:
        proc.wait(timeout=seconds)
        return False
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        return True


def poll(condition, what: str, timeout: float = 30.0):
    """condition()'s first truthy value, asked every 50 ms; fails naming `what` after
    `timeout` seconds (a background thread's result, not a sleep standing in for one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def messages_accounted(bootstrap: str, db: Path, group: str, partitions: int) -> int:
    """Messages of the ticks topic stored: per partition, the store's offset or the group's
    committed one (a dead member's store), whichever is further; ingest has exited."""
    from kafka import KafkaConsumer, TopicPartition

    con = store.connect(db, read_only=True)
    try:
        stored = dict(con.execute('SELECT "partition", next_offset FROM ingest_offsets').fetchall())
    finally:
        con.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return sum(max(stored.get(p, 0), consumer.committed(TopicPartition(TOPIC, p)) or 0) for p in range(partitions))
    finally:
        consumer.close()


def drain_after_killed_members(bootstrap: str, folder: Path, members: int = 4,
                               kill_after: list[float] | None = None, until_idle: float = 5,
                               drain_wait: float | None = None) -> tuple[int, str]:
    """`members` ingest workers of one group SIGKILLed, then a drain of the group: (its exit
    status, its log). Each member dies `kill_after[i]` seconds after its start (joining,
    syncing or holding partitions, as a crash loop's members do), or, without kill_after,
    once the group gave each partitions (so that they die holding them, their sessions
    running on). Every partition has records before the members start. `drain_wait`: the
    drain's --drain-wait (None: its default, twice the session timeout)."""
    group = ["--kafka", bootstrap, "--group", "g", "--session-timeout-ms", "6000"]
    logs = [folder / f"member-{i}.log" for i in range(members)]
    procs = [subprocess.Popen([*SLICEMETER, "ingest", *group, "--db", str(folder / f"member-{i}.duckdb")],
                              stdout=subprocess.DEVNULL, stderr=open(logs[i], "w")) for i in range(members)]
    started = time.monotonic()
    try:
        if kill_after is not None:
            for proc, at in sorted(zip(procs, kill_after), key=lambda pair: pair[1]):
                time.sleep(max(0.0, started + at - time.monotonic()))
                proc.send_signal(signal.SIGKILL)
        else:
            # each killed once the group gave it partitions; on a loaded machine one may still be
            # joining after a minute, and dies joining (a crash loop's member does too)
            deadline = started + 60
            while (time.monotonic() < deadline and all(p.poll() is None for p in procs)
                   and not all("slicemeter.ingest: assigned partitions [" in log.read_text() for log in logs)):
                time.sleep(0.05)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    try:
        wait = [] if drain_wait is None else ["--drain-wait", str(drain_wait)]
        drain = subprocess.run([*SLICEMETER, "ingest", *group, "--db", str(folder / "drain.duckdb"),
                                "--until-idle", str(until_idle), *wait], capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired as exc:   # a drain that never ends is a failed one, with its log
        err = exc.stderr or b""
        return -9, (err.decode(errors="replace") if isinstance(err, bytes) else err) + "\n(killed after 240 s)"
    return drain.returncode, drain.stderr
