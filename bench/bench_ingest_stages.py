"""Where an ingest sample's CPU goes, stage by stage: the Kafka client alone, then decode,
`prepare` and the transaction in one thread without Kafka.

bench/bench_ingest.py measures the whole pipeline's rate, which on a shared 2-core machine
swings by ~20 % from run to run. CPU-seconds of single-threaded stages swing much less,
so this bench is the one to compare builds with:

    python bench/bench_ingest_stages.py                   # 4 M samples
    python bench/bench_ingest_stages.py --samples 2000000

It prints CPU microseconds per sample for:

1. the Kafka client draining the messages from Tansu with the ingest's consumer settings
   (no decoding), and
2. the same messages stored in process, batch by batch as the consumer forms them:
   decode (`slicemeter.tick.decode`), `prepare` (string ids, inventory, hour deltas) and
   the transaction (`write_prepared`, folding every 8 batches), and the last checkpoint.

It also prints DuckDB's own Arrow insert of the same stored rows (the references of
bench_ingest.py) and the in-process rate against them.

CPU is the process's (every thread's), taken around each stage. The stages run one at a
time, so each stage's figure includes DuckDB's worker threads.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path


from slicemeter.testkit.ingest_reference import print_references
from slicemeter import store
from slicemeter.ingest.consumer import IngestConfig
from slicemeter.ingest.strings import StringIds
from slicemeter.ingest.writer import (Batch, InventoryCache, configure_writes, held_after, held_slice_table,
                           prepare, write_prepared)
from slicemeter.testkit.ingest_helpers import TOPIC, create_topic, produce_chunks
from slicemeter.broker import TansuBroker
from slicemeter.tick import decode, encode_tables
from slicemeter.testkit.synth_ticks import fleet, messages, recent_start_ms


def cpu_s() -> float:
    return time.process_time()   # every thread of the process


def kafka_drain(chunks: list, samples: int) -> tuple[float, float]:
    """(CPU s, wall s) for kafka-python to hand out every message once, nothing else."""
    from kafka import KafkaConsumer, TopicPartition

    cfg = IngestConfig(bootstrap="", db=Path("unused"))
    with tempfile.TemporaryDirectory() as tmp, TansuBroker(log_path=Path(tmp) / "tansu.log") as broker:
        create_topic(broker.bootstrap, TOPIC, 4)
        n_msg, produced = produce_chunks(broker.bootstrap, iter(chunks))
        assert produced == samples
        consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                                 max_poll_records=cfg.max_poll_records,
                                 max_partition_fetch_bytes=cfg.max_partition_fetch_bytes,
                                 fetch_max_bytes=cfg.fetch_max_bytes)
        try:
            partitions = [TopicPartition(TOPIC, p) for p in range(4)]
            consumer.assign(partitions)
            for tp in partitions:
                consumer.seek_to_beginning(tp)
            got, c0, t0 = 0, cpu_s(), time.perf_counter()
            while got < n_msg:
                got += sum(len(records) for records in consumer.poll(timeout_ms=1000).values())
            return cpu_s() - c0, time.perf_counter() - t0
        finally:
            consumer.close()


def in_process(payloads: list[bytes], db: Path, batch_samples: int, fold_every: int) -> tuple[dict, float]:
    """CPU s per stage and wall s of storing `payloads` batch by batch on one thread."""
    cpu: dict[str, float] = defaultdict(float)
    con = store.connect(db)
    configure_writes(con, IngestConfig(bootstrap="", db=db).duckdb_memory)
    strings, inventory, held = StringIds(con), InventoryCache(con), held_slice_table(con)
    t0 = time.perf_counter()
    i = n_batches = 0
    while i < len(payloads):
        batch = Batch()
        c = cpu_s()
        while i < len(payloads) and not batch.full(batch_samples, held.num_rows):
            batch.add_tables(decode(payloads[i]))
            batch.messages += 1
            i += 1
            batch.next_offsets[(TOPIC, 0)] = i
        cpu["decode"] += cpu_s() - c
        c = cpu_s()
        prepared = prepare(con, batch, strings, inventory, held)
        held = held_after(prepared, held)
        cpu["prepare"] += cpu_s() - c
        n_batches += 1
        prepared.fold_rollups = n_batches % fold_every == 0 or i == len(payloads)
        c = cpu_s()
        write_prepared(con, prepared)
        cpu["transaction"] += cpu_s() - c
    c = cpu_s()
    con.execute("CHECKPOINT")
    con.close()
    cpu["checkpoint, close"] += cpu_s() - c
    return cpu, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=4_000_000)
    ap.add_argument("--batch-samples", type=int, default=IngestConfig(bootstrap="", db=Path()).batch_samples)
    ap.add_argument("--no-kafka", action="store_true", help="skip the Kafka client's stage")
    args = ap.parse_args()
    nodes = fleet(40, ["https://acme.tenants.example:6443", "https://beta.tenants.example:6443"])
    ticks = max(1, args.samples // (nodes[0].samples_per_tick * len(nodes)))
    chunks = list(messages(nodes, recent_start_ms(ticks), ticks, 250))
    samples = sum(g.num_rows + s.num_rows for _, g, s in chunks)
    payloads = [encode_tables(g, s) for _, g, s in chunks]
    us = 1e6 / samples
    print(f"{samples:,} samples in {len(payloads):,} messages")
    if not args.no_kafka:
        k_cpu, k_wall = kafka_drain(chunks, samples)
        print(f"kafka-python drain alone: {k_cpu * us:.2f} us CPU per sample ({k_wall:.2f} s wall)")
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "stages.duckdb"
        cpu, wall = in_process(payloads, db, args.batch_samples, IngestConfig(bootstrap="", db=db).fold_every_batches)
        total = sum(cpu.values())
        print(f"in process, one thread: {total * us:.2f} us CPU per sample, {samples / wall:,.0f} samples/s")
        for stage, seconds in cpu.items():
            print(f"  {stage:17s} {seconds * us:5.2f} us ({seconds:.2f} s)")
        print_references(db, Path(tmp), samples / wall, args.batch_samples, what="in-process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
