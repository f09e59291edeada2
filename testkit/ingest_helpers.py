"""Shared by the ingest tests and bench/bench_ingest.py: topic setup, producing Tick
messages, and an order-independent checksum of stored samples."""
from __future__ import annotations

import sys
import time

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

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
    return KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4", linger_ms=20,
                         batch_size=1 << 20, max_request_size=16 << 20, acks="all")


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


def produce_raw(bootstrap: str, values: list[tuple[bytes, bytes | None]], topic: str = TOPIC) -> None:
    p = producer(bootstrap)
    for key, value in values:
        p.send(topic, key=key, value=value)
    p.flush()
    p.close()


# The CLI as a child process. Not `python -m slicemeter.cli`: run as __main__ that module's
# ConfigError would be a second class, and config errors would not map to exit code 2.
SLICEMETER = [sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())"]


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
