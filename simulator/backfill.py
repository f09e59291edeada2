"""`slicemeter backfill`: publish a scenario's simulated history to Kafka.

slicemeter.simulator.timetravel.generate yields columnar Tick tables per node and time chunk; each
becomes one or more messages (many Ticks of one node each, key = node) encoded with the
wire contract's encode_tables, the same encoder the exporter uses. A progress bar on
stderr follows simulated time.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import pyarrow as pa

from slicemeter import clock, kafka_security, signing
from slicemeter.common import ConfigError, MiB
from slicemeter.progress import ProgressReporter

MAX_ROWS_PER_MESSAGE = 50_000   # keeps messages well under Kafka's default 1 MB x lz4 / 10 MB limits


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", required=True, help="scenario YAML (docs/simulator.md)")
    p.add_argument("--start", required=True, metavar="DATE", help="UTC start, e.g. 2026-11-01 or 2026-11-01T06:00")
    p.add_argument("--days", required=True, type=float, metavar="N")
    p.add_argument("--kafka", required=True, metavar="HOST:PORT")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between Ticks")
    p.add_argument("--topic", default="slicemeter.ticks")
    p.add_argument("--partitions", type=int, default=4, help="partitions if the topic must be created")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--signing-key-file", metavar="FILE", help="sign every message (docs/security.md)")
    p.add_argument("--signing-key-id", metavar="ID")
    kafka_security.add_options(p)


def bulk_producer(bootstrap: str, security: dict | None = None):
    """A kafka-python producer for history: large lz4 batches (a message holds many Ticks of
    a node, up to 16 MiB), unlike the exporter's one Tick at a time (exporter/ship/publisher.py)."""
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=bootstrap, compression_type="lz4", linger_ms=20,
                         batch_size=MiB, max_request_size=16 * MiB, acks="all", **(security or {}))


def parse_start(text: str) -> int:
    """UTC epoch milliseconds of a date or ISO date-time (naive = UTC)."""
    try:
        return int(clock.parse_instant(text, "--start").timestamp() * 1000)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def split_by_ticks(gpus: pa.Table, slices: pa.Table, max_rows: int = MAX_ROWS_PER_MESSAGE):
    """Cut one node's chunk into messages of whole Ticks with at most ~max_rows rows each."""
    if gpus.num_rows + slices.num_rows <= max_rows:
        yield gpus, slices
        return
    g_ts = gpus.column("ts_ms").to_numpy()
    s_ts = slices.column("ts_ms").to_numpy()
    ticks = np.unique(np.concatenate([g_ts, s_ts]))
    per_tick = max(1, (gpus.num_rows + slices.num_rows) // max(1, len(ticks)))
    step = max(1, max_rows // per_tick)
    for i in range(0, len(ticks), step):
        lo, hi = ticks[i], ticks[min(i + step, len(ticks)) - 1]
        g = gpus.filter(pa.array((g_ts >= lo) & (g_ts <= hi)))
        s = slices.filter(pa.array((s_ts >= lo) & (s_ts <= hi)))
        yield g, s


class Progress:
    """Backfill's progress: the share of [start_ms, end_ms) published, samples and their rate."""

    def __init__(self, start_ms: int, end_ms: int, enabled: bool, out=sys.stderr):
        self.start_ms, self.end_ms = start_ms, end_ms
        self.reporter = ProgressReporter(out, enabled)
        self.t0 = time.monotonic()

    def _args(self, ts_ms: int, samples: int) -> tuple[float, str]:
        rate = samples / max(1e-9, time.monotonic() - self.t0)
        return (ts_ms - self.start_ms) / max(1, self.end_ms - self.start_ms), f"backfill {samples:,} samples {rate:,.0f}/s"

    def update(self, ts_ms: int, samples: int) -> None:
        self.reporter.show(*self._args(ts_ms, samples))

    def done(self, samples: int) -> None:
        self.reporter.done(*self._args(self.end_ms, samples))


def _ensure_topic(bootstrap: str, topic: str, partitions: int, security: dict) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **security)
    try:
        if topic not in admin.list_topics():
            try:
                admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
            except TopicAlreadyExistsError:
                pass
    finally:
        admin.close()


def run(args: argparse.Namespace) -> int:
    from slicemeter.simulator.scenario import ScenarioError, load_scenario
    from slicemeter.simulator.timetravel import generate
    from slicemeter.tick import encode_tables

    if args.days <= 0:
        raise ConfigError(f"--days must be > 0, got {args.days}")
    if args.interval <= 0:
        raise ConfigError(f"--interval must be > 0, got {args.interval}")
    start_ms = parse_start(args.start)
    end_ms = start_ms + int(args.days * 86_400_000)
    try:
        scenario = load_scenario(args.scenario)
    except ScenarioError as exc:
        raise ConfigError(f"--scenario: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"--scenario: cannot read {args.scenario}: {exc.strerror}") from None
    security = kafka_security.settings(args)
    key = signing.key_from_options(args.signing_key_file, args.signing_key_id)
    _ensure_topic(args.kafka, args.topic, args.partitions, security)
    producer = bulk_producer(args.kafka, security)
    progress = Progress(start_ms, end_ms, enabled=not args.no_progress)
    samples = messages = 0
    for node, gpus, slices in generate(scenario, start_ms, end_ms, interval_s=args.interval, seed=args.seed):
        if gpus.num_rows + slices.num_rows == 0:
            continue   # a node that has not joined yet
        for g, s in split_by_ticks(gpus, slices):
            value = encode_tables(g, s)
            producer.send(args.topic, key=node.encode(), value=value,
                          headers=signing.signed_headers(*key, value) if key else None)
            samples += g.num_rows + s.num_rows
            messages += 1
        if gpus.num_rows:
            progress.update(int(gpus.column("ts_ms")[-1].as_py()), samples)
    producer.flush()
    producer.close()
    progress.done(samples)
    print(f"published {samples:,} samples in {messages:,} messages to {args.topic}", file=sys.stderr)
    return 0
