"""Poison records on the Ticks topic cost only themselves: `slicemeter ingest` (a child
process, the real Tansu broker) dead-letters each with its reason, stores every honest Tick
once, never exits, and its peak RSS stays under the bound docs/ingest.md states."""
from __future__ import annotations

import dataclasses
import hashlib
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from slicemeter import signing, store
from slicemeter.ingest.consumer import IngestConfig, memory_bound
from slicemeter.testkit.hostile_ticks import (CODEC_IDS, decompression_bomb, null_count_lie, produce_raw_batch,
                                              random_junk, record_batch, zeros_gzip, zeros_lz4, zeros_zstd)
from slicemeter.testkit.ingest_helpers import SLICEMETER, TOPIC, create_topic, expected_checksum, produce_raw
from slicemeter.testkit.synth_ticks import recent_midnight_ms
from slicemeter.tick import GpuReading, SliceReading, Tick, encode_ticks, ticks_to_tables
from slicemeter.common import GiB

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.broker
CLUSTER = "https://acme.example:6443"
KEY_ID, KEY = "acme-1", b"acme-secret-0123456789"
T0 = recent_midnight_ms(days_ago=2) + 9 * 3_600_000
DUCKDB_MEMORY = 100 * 1000 * 1000          # --duckdb-memory 100MB


def honest(node: str, i: int, pod: str = "train-0") -> Tick:
    return Tick(node=node, cluster=CLUSTER, ts_ms=T0 + i * 10_000, interval_ms=10_000,
                gpus=[GpuReading(f"GPU-{node}", 0, "NVIDIA A100-SXM4-80GB", 80 * GiB, 8 * GiB, 0.2, 0.1,
                                 200.0, 1.0e6 + i, 1)],
                slices=[SliceReading(f"uid-{node}", "main", f"GPU-{node}", pod=pod, namespace="ml",
                                     hami_memory_used_bytes=(i % 7) * GiB, alloc_memory_bytes=20 * GiB,
                                     alloc_cores_ratio=0.25, sm_util_ratio=0.2, whole_gpu=False, source="hami")])


def signed(value: bytes) -> list:
    return signing.signed_headers(KEY_ID, KEY, value)




def publishers_file(tmp_path: Path) -> Path:
    (tmp_path / "acme.key").write_bytes(KEY)
    config = tmp_path / "publishers.yaml"
    config.write_text(f"publishers:\n  - {{key_id: {KEY_ID}, key_file: acme.key, clusters: ['{CLUSTER}']}}\n")
    return config


@dataclasses.dataclass
class Run:
    alive_after_drain: bool
    returncode: int
    peak_rss: int
    db: Path
    log: str


def run_ingest(bootstrap: str, tmp_path: Path, records: int, *extra: str, deadline_s: float = 120) -> Run:
    """`slicemeter ingest` until its reader file shows all `records` consumed, then SIGTERM;
    its peak RSS as the kernel's high-water mark of its own memory (VmHWM), read just before
    the signal. wait4's ru_maxrss would not do: Linux keeps the largest RSS a process had
    across exec, so a child forked from a test process that has grown reports the test's."""
    db, snapshot, log = tmp_path / "i.duckdb", tmp_path / "reader.duckdb", tmp_path / "ingest.log"
    env = {**os.environ, "SLICEMETER_NOW": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 / 1000 + 600))}
    with log.open("w") as out:
        proc = subprocess.Popen([*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", str(db), "--group", "",
                                 "--duckdb-memory", "100MB", "--snapshot", str(snapshot),
                                 "--snapshot-interval", "1", *extra],
                                cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + deadline_s
    consumed, alive = -1, True
    while consumed < records:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)   # not Popen.poll: wait4 keeps the rusage
        if pid:
            alive = False
            break
        assert time.monotonic() < deadline, f"{consumed} of {records} consumed:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)  # polling interval; the condition is the reader file's offsets
        try:
            with duckdb.connect(str(snapshot), read_only=True) as con:
                consumed = con.execute("SELECT coalesce(sum(next_offset), 0) FROM ingest_offsets").fetchone()[0]
        except (duckdb.Error, OSError):
            pass   # not written yet, or being renamed over
    peak = usage.ru_maxrss * 1024 if not alive else high_water_rss(proc.pid)
    if alive:
        proc.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(alive, proc.returncode, peak, db, log.read_text())


def high_water_rss(pid: int) -> int:
    """The peak resident size of `pid`'s memory since its exec, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def dead_letters(db: Path) -> dict[int, tuple]:
    con = store.connect(db)
    try:
        return {r[0]: r[1:] for r in con.execute(
            'SELECT "offset", error, octet_length(payload), payload_bytes, payload_sha256 FROM dead_letters').fetchall()}
    finally:
        con.close()


def bound() -> int:
    return memory_bound(IngestConfig(bootstrap="", db=Path()), DUCKDB_MEMORY)


def assert_survived(run: Run) -> None:
    assert run.alive_after_drain, f"ingest exited {run.returncode}:\n{run.log[-3000:]}"
    assert run.returncode == 0, run.log[-3000:]
    assert run.peak_rss < bound(), f"peak RSS {run.peak_rss >> 20} MiB over the bound {bound() >> 20} MiB"


# ---- one test per reported poison record ---------------------------------------------------

def test_a_column_claiming_more_nulls_than_rows_is_a_dead_letter(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    lie_tick = honest("node-a", 0)
    lie_tick.gpus = [dataclasses.replace(lie_tick.gpus[0], gpu_uuid=f"GPU-{g}", gpu_index=g) for g in range(3)]
    lie = null_count_lie(lie_tick)        # sm_util_ratio: 8 nulls in 3 rows
    produce_raw(broker.bootstrap, [(b"node-a", lie, None)])      # alone in its batch
    run = run_ingest(broker.bootstrap, tmp_path, 1)
    assert_survived(run)
    letters = dead_letters(run.db)
    assert list(letters) == [0] and "claims 8 null(s) in 3 rows" in letters[0][0]
    produce_raw(broker.bootstrap, [(b"node-a", encode_ticks([honest("node-a", 1)]), None)])
    assert_survived(run := run_ingest(broker.bootstrap, tmp_path, 2))
    con = store.connect(run.db)
    assert con.execute("SELECT ts_ms FROM raw_gpu").fetchall() == [(T0 + 10_000,)]
    assert con.execute("SELECT count(*) FROM dead_letters").fetchone() == (1,)


def test_a_decompression_bomb_is_refused_before_it_unpacks(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    bomb = decompression_bomb(rows=1 << 28)          # 2 GiB of zeros in ~70 KB
    assert len(bomb) < 100_000
    produce_raw(broker.bootstrap, [(b"node-a", bomb, None), (b"node-a", encode_ticks([honest("node-a", 0)]), None)])
    run = run_ingest(broker.bootstrap, tmp_path, 2)
    assert_survived(run)
    letters = dead_letters(run.db)
    assert list(letters) == [0] and "over the maximum" in letters[0][0]
    assert letters[0][2:4] == (len(bomb), hashlib.sha256(bomb).digest())


def test_a_flood_of_unsigned_junk_keeps_only_bounded_dead_letters(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    junk = [random_junk(1 << 20, seed) for seed in range(120)]          # 120 MiB
    produce_raw(broker.bootstrap, [(b"x", j, None) for j in junk])
    produce_raw(broker.bootstrap, [(b"node-a", v, signed(v)) for v in [encode_ticks([honest("node-a", 0)])]])
    run = run_ingest(broker.bootstrap, tmp_path, 121, "--publishers", str(publishers_file(tmp_path)))
    assert_survived(run)
    letters = dead_letters(run.db)
    assert sorted(letters) == list(range(120))
    for offset, (error, kept, length, digest) in letters.items():
        assert error.startswith("unsigned message")
        assert (kept, length, digest) == (1024, 1 << 20, hashlib.sha256(junk[offset]).digest())


def test_signed_ticks_with_64_kib_pod_names_are_dead_letters(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    long_names = [encode_ticks([honest("node-a", i, pod=f"{i:05d}" + "p" * (64 * 1024 - 5))]) for i in range(2400)]
    produce_raw(broker.bootstrap, [(b"node-a", v, signed(v)) for v in long_names])
    fine = encode_ticks([honest("node-a", 0)])
    produce_raw(broker.bootstrap, [(b"node-a", fine, signed(fine))])
    run = run_ingest(broker.bootstrap, tmp_path, 2401, "--publishers", str(publishers_file(tmp_path)))
    assert_survived(run)
    letters = dead_letters(run.db)
    assert sorted(letters) == list(range(2400))
    assert all("slice.pod: a value of 65536 bytes, over the 253-byte maximum" in e for e, *_ in letters.values())
    con = store.connect(run.db)
    assert con.execute("SELECT ts_ms, pod FROM raw_slice").fetchall() == [(T0, "train-0")]


# ---- Kafka record batches: the protocol's own compression -----------------------------------

BATCH_BOMBS = {"gzip": zeros_gzip, "lz4": zeros_lz4, "zstd": zeros_zstd}


def lz4_frame_compress(plain: bytes) -> bytes:
    import lz4.frame

    return lz4.frame.compress(plain)


def _batch_between_honest_ticks(bootstrap: str, batch: bytes) -> None:
    """Offset 0 an honest Tick, offset 1 `batch` (one record), offset 2 an honest Tick."""
    create_topic(bootstrap, partitions=1)
    produce_raw(bootstrap, [(b"node-a", encode_ticks([honest("node-a", 0)]), None)])
    produce_raw_batch(bootstrap, TOPIC, 0, batch)
    produce_raw(bootstrap, [(b"node-a", encode_ticks([honest("node-a", 1)]), None)])


def _assert_only_the_batch_is_dead(run: Run, reason: str) -> None:
    assert_survived(run)
    letters = dead_letters(run.db)
    assert list(letters) == [1], letters
    assert "record batch refused: partition 0, offsets 1-1" in letters[1][0] and reason in letters[1][0], letters
    con = store.connect(run.db)
    assert con.execute("SELECT ts_ms FROM raw_gpu ORDER BY ts_ms").fetchall() == [(T0,), (T0 + 10_000,)]


@pytest.mark.parametrize("codec", sorted(BATCH_BOMBS))
def test_a_compressed_record_batch_bomb_is_refused_while_it_unpacks(broker, tmp_path, codec):
    bomb = record_batch([(b"node-a", b"x")], CODEC_IDS[codec], payload=BATCH_BOMBS[codec](1 << 30))  # 1 GiB of zeros
    assert len(bomb) < 8 << 20
    create_topic(broker.bootstrap, partitions=1)
    produce_raw(broker.bootstrap, [(b"node-a", encode_ticks([honest("node-a", 0)]), None)])
    produce_raw_batch(broker.bootstrap, TOPIC, 0, bomb)
    assert_survived(run_ingest(broker.bootstrap, tmp_path, 2))
    # the next run resumes just below its stored offset, at the refused batch: it must
    # recognise it as the record it stored
    produce_raw(broker.bootstrap, [(b"node-a", encode_ticks([honest("node-a", 1)]), None)])
    run = run_ingest(broker.bootstrap, tmp_path, 3)
    _assert_only_the_batch_is_dead(run, f"codec {codec}: decompresses past the maximum of")
    assert "differs" not in run.log and "mismatch" not in run.log, run.log[-3000:]
    con = store.connect(run.db)
    assert con.execute("SELECT count(*) FROM ingest_offset_events").fetchone() == (0,)


@pytest.mark.parametrize("codec", sorted(CODEC_IDS))
def test_a_record_batch_that_does_not_decompress_is_refused(broker, tmp_path, codec):
    batch = record_batch([(b"node-a", encode_ticks([honest("node-a", 5)]))], CODEC_IDS[codec],
                         payload=random_junk(4096, 3))
    _batch_between_honest_ticks(broker.bootstrap, batch)
    run = run_ingest(broker.bootstrap, tmp_path, 3)
    _assert_only_the_batch_is_dead(run, f"codec {codec}: ")


def test_a_record_batch_failing_its_crc_or_unpacking_to_no_records_is_refused(broker, tmp_path):
    """Offset 1: a batch whose CRC does not match; 2: lz4 that unpacks to bytes that are not records."""
    create_topic(broker.bootstrap, partitions=1)
    produce_raw(broker.bootstrap, [(b"node-a", encode_ticks([honest("node-a", 0)]), None)])
    bad_crc = bytearray(record_batch([(b"node-a", encode_ticks([honest("node-a", 7)]))], 0, lambda plain: plain))
    bad_crc[17:21] = bytes(b ^ 0xFF for b in bad_crc[17:21])
    produce_raw_batch(broker.bootstrap, TOPIC, 0, bytes(bad_crc))
    produce_raw_batch(broker.bootstrap, TOPIC, 0, record_batch([(b"node-a", b"v")], CODEC_IDS["lz4"],
                                                                 lambda plain: lz4_frame_compress(b"\x7f" * 64)))
    produce_raw(broker.bootstrap, [(b"node-a", encode_ticks([honest("node-a", 1)]), None)])
    run = run_ingest(broker.bootstrap, tmp_path, 4)
    assert_survived(run)
    letters = dead_letters(run.db)
    assert sorted(letters) == [1, 2], letters
    assert "offsets 1-1, codec none: CRC mismatch" in letters[1][0]
    assert "offsets 2-2, codec lz4: [Error 2] CorruptRecordError: Found invalid number of record headers" in letters[2][0]
    con = store.connect(run.db)
    assert con.execute("SELECT ts_ms FROM raw_gpu ORDER BY ts_ms").fetchall() == [(T0,), (T0 + 10_000,)]


def test_a_drain_counts_a_refused_batch_at_the_end_of_its_partition_as_consumed(broker, tmp_path):
    """Three records in one lz4 batch that does not decompress, last on the partition:
    `--until-idle` stores up to its end and exits 0 (a dead letter is a verdict, not work left)."""
    create_topic(broker.bootstrap, partitions=1)
    produce_raw(broker.bootstrap, [(b"node-a", encode_ticks([honest("node-a", 0)]), None)])
    produce_raw_batch(broker.bootstrap, TOPIC, 0, record_batch([(b"node-a", b"v")] * 3, CODEC_IDS["lz4"],
                                                                 payload=random_junk(512, 9)))
    db = tmp_path / "drain.duckdb"
    env = {**os.environ, "SLICEMETER_NOW": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 / 1000 + 600))}
    done = subprocess.run([*SLICEMETER, "ingest", "--kafka", broker.bootstrap, "--db", str(db), "--group", "",
                           "--until-idle", "30"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    con = store.connect(db)
    assert con.execute("SELECT next_offset FROM ingest_offsets").fetchall() == [(4,)]
    assert con.execute("SELECT ts_ms FROM raw_gpu").fetchall() == [(T0,)]
    letters = con.execute('SELECT "offset", error FROM dead_letters').fetchall()
    assert len(letters) == 1 and letters[0][0] == 1, letters
    assert "record batch refused: partition 0, offsets 1-3, codec lz4: corrupt lz4 data" in letters[0][1]


def test_a_poll_past_its_decompression_budget_leaves_the_next_batch_to_the_next_poll(broker, monkeypatch):
    """With a budget of one byte every poll decompresses one batch: the rest of the fetch
    comes again, each record once and in order."""
    from kafka import KafkaConsumer, TopicPartition

    from slicemeter.ingest import kafka_batches

    create_topic(broker.bootstrap, partitions=1)
    batches = [[(b"k", f"{b}-{i}".encode()) for i in range(3)] for b in range(5)]
    for records in batches:
        produce_raw_batch(broker.bootstrap, TOPIC, 0, record_batch(records, CODEC_IDS["lz4"], lz4_frame_compress))
    kafka_batches.install()
    monkeypatch.setattr(kafka_batches, "POLL_DECOMPRESSED_BYTES", 1)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        consumer.seek_to_beginning()
        polls, deadline = [], time.monotonic() + 30
        while sum(map(len, polls)) < 15:
            assert time.monotonic() < deadline, polls
            kafka_batches.start_poll()
            if got := [r.value for rs in consumer.poll(timeout_ms=200).values() for r in rs]:
                polls.append(got)
    finally:
        consumer.close()
    assert polls == [[v for _, v in records] for records in batches]


def test_an_old_format_compressed_message_set_is_refused_whole_and_the_next_batch_read():
    """Magic 0/1 message sets (before Kafka 0.11; Tansu and Kafka 4 refuse them, older
    brokers keep them): a compressed one is one refusal at its wrapper's offset."""
    from kafka.consumer import fetcher
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from slicemeter.ingest import kafka_batches

    kafka_batches.install()
    old = LegacyRecordBatchBuilder(magic=1, compression_type=CODEC_IDS["gzip"], batch_size=1 << 20)
    for i in range(3):
        old.append(i, timestamp=None, key=b"k", value=b"\0" * 1000)
    honest_batch = bytearray(record_batch([(b"node-a", b"v")], CODEC_IDS["lz4"], lz4_frame_compress))
    honest_batch[:8] = (3).to_bytes(8, "big")                    # the base offset after the old message set
    legacy = bytearray(old.build())
    legacy[:8] = (2).to_bytes(8, "big")       # a broker gives the wrapper its last message's offset
    records = fetcher.MemoryRecords(bytes(legacy) + bytes(honest_batch))
    refused = list(records.next_batch())
    assert [(r.offset, r.value.codec, r.value.reason) for r in refused] == [
        (2, "gzip", "compressed message set of magic 1 not read")]
    assert [(r.offset, r.value) for r in records.next_batch()] == [(3, b"v")]
    assert records.next_batch() is None


def test_ingest_refuses_to_start_without_the_kafka_internals_it_bounds(monkeypatch, tmp_path):
    from kafka.record.default_records import DefaultRecordBatch

    from slicemeter.common import ConfigError
    from slicemeter.ingest.consumer import Ingestor

    monkeypatch.delattr(DefaultRecordBatch, "_maybe_uncompress")
    with pytest.raises(ConfigError, match=r"kafka-python \S+ lacks DefaultRecordBatch._maybe_uncompress"):
        Ingestor(IngestConfig(bootstrap="127.0.0.1:1", db=tmp_path / "i.duckdb"))


def test_inflate_caps_every_codec_and_names_what_it_refuses():
    import gzip

    import lz4.frame
    import zstandard

    from slicemeter.ingest.kafka_batches import BatchRefused, inflate

    data = b"tick " * 1000
    compressed = {"gzip": gzip.compress(data) * 2, "lz4": lz4.frame.compress(data) * 2,
                  "zstd": zstandard.ZstdCompressor().compress(data) * 2,
                  "snappy": pa.compress(data * 2, codec="snappy", asbytes=True)}
    # the Java producer's snappy: xerial framing, blocks of raw snappy each headed by its length
    block = pa.compress(data, codec="snappy", asbytes=True)
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + (struct.pack(">i", len(block)) + block) * 2
    assert inflate(CODEC_IDS["snappy"], xerial) == data * 2
    for codec, payload in compressed.items():
        assert inflate(CODEC_IDS[codec], payload, cap=2 * len(data)) == data * 2, codec
        with pytest.raises(BatchRefused, match=f"past the maximum of {2 * len(data) - 1} bytes"):
            inflate(CODEC_IDS[codec], payload, cap=2 * len(data) - 1)
    with pytest.raises(BatchRefused, match="gzip stream ends early"):
        inflate(CODEC_IDS["gzip"], compressed["gzip"][:30])
    with pytest.raises(BatchRefused, match="unsupported codec 6"):
        inflate(6, b"anything")


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_honest_ticks_in_snappy_and_zstd_batches_are_stored(broker, tmp_path, codec):
    import zstandard

    compress = {"snappy": lambda b: pa.compress(b, codec="snappy", asbytes=True),
                "zstd": lambda b: zstandard.ZstdCompressor().compress(b)}[codec]
    create_topic(broker.bootstrap, partitions=1)
    ticks = [honest("node-a", i) for i in range(3)]
    produce_raw_batch(broker.bootstrap, TOPIC, 0, record_batch([(b"node-a", encode_ticks([t])) for t in ticks],
                                                                CODEC_IDS[codec], compress=compress))
    run = run_ingest(broker.bootstrap, tmp_path, 3)
    assert_survived(run)
    assert dead_letters(run.db) == {}
    con = store.connect(run.db)
    assert con.execute("SELECT ts_ms FROM raw_gpu ORDER BY ts_ms").fetchall() == [(t.ts_ms,) for t in ticks]


# ---- the soak: every kind at once -----------------------------------------------------------

def test_a_hostile_topic_costs_only_its_poison(broker, tmp_path):
    """Honest signed Ticks of 8 nodes interleaved with every kind of poison record; one
    partition so the offsets of the bad ones are known."""
    create_topic(broker.bootstrap, partitions=1)
    nodes, rounds = [f"node-{n}" for n in range(8)], 60
    honest_ticks = [honest(node, i) for i in range(rounds) for node in nodes]
    poison = {
        "null": lambda i: (null_count_lie(honest("node-0", 10_000 + i)), True, "null(s) in"),
        "bomb": lambda i: (decompression_bomb(rows=1 << 27), True, "over the maximum"),
        "junk": lambda i: (random_junk(256 << 10, i), True, "bad magic"),
        "unsigned": lambda i: (encode_ticks([honest("node-1", 20_000 + i)]), False, "unsigned message"),
        "long name": lambda i: (encode_ticks([honest("node-2", 30_000 + i, pod="p" * (64 << 10))]), True,
                                "over the 253-byte maximum"),
        # a first-round Tick again, up to ten minutes later: past the 60 s that ingest keeps
        # in memory below, so the store's record of instants refuses it
        "replay": lambda i: (encode_ticks([honest_ticks[i // 8 % 8]]), True, "duplicate"),
        # a record batch that unpacks to 1 GiB, sent as it is (produce_raw_batch below)
        "batch bomb": lambda i: (batch_bomb, None, "codec gzip: decompresses past the maximum"),
    }
    batch_bomb = record_batch([(b"batch bomb", b"x")], CODEC_IDS["gzip"], payload=zeros_gzip(1 << 30))
    records, expected_dead = [], {}
    for i, t in enumerate(honest_ticks):
        value = encode_ticks([t])
        records.append((t.node.encode(), value, signed(value)))
        if i % 8 == 7:   # a poison record after every round of honest Ticks
            kind = sorted(poison)[(i // 8) % len(poison)]
            bad, sign, reason = poison[kind](i - 7)
            expected_dead[len(records)] = reason
            records.append((kind.encode(), bad, signed(bad) if sign else None) if sign is not None else bad)
    start = 0
    for at, record in [*((at, r) for at, r in enumerate(records) if isinstance(r, bytes)), (len(records), None)]:
        produce_raw(broker.bootstrap, records[start:at])
        if record is not None:
            produce_raw_batch(broker.bootstrap, TOPIC, 0, record)
        start = at + 1
    run = run_ingest(broker.bootstrap, tmp_path, len(records), "--publishers", str(publishers_file(tmp_path)),
                     "--dedupe-window-seconds", "60")
    assert_survived(run)
    letters = dead_letters(run.db)
    assert sorted(letters) == sorted(expected_dead)
    for offset, reason in expected_dead.items():
        assert reason in letters[offset][0], (offset, letters[offset][0])
    assert {len(set(r for r in expected_dead.values()))} == {len(poison)}
    chunks = [(t.node, *ticks_to_tables([t])) for t in honest_ticks]
    con = store.connect(run.db)
    assert con.execute(store.sql_text("testkit/sample_checksum.sql")).fetchone() == expected_checksum(chunks)


# ---- the decoder's bounds, unit by unit --------------------------------------------------

def test_decode_refuses_what_would_decode_past_its_cap():
    from slicemeter.tick import MAX_DECODED_BYTES, MAX_ROWS, TickDecodeError, decode

    with pytest.raises(TickDecodeError, match=f"over the maximum of {MAX_DECODED_BYTES}"):
        decode(decompression_bomb(rows=MAX_ROWS, columns=16))         # 128 MiB in rows under the cap
    with pytest.raises(TickDecodeError, match=f"rows, over the maximum of {MAX_ROWS}"):
        decode(decompression_bomb(rows=MAX_ROWS + 1))


def test_decode_caps_each_name_column():
    from slicemeter.tick import NAME_MAX_BYTES, TickDecodeError, decode

    t = honest("node-a", 0)
    t.slices[0].namespace = "n" * NAME_MAX_BYTES["namespace"]
    assert decode(encode_ticks([t])).slices.column("namespace")[0].as_py() == t.slices[0].namespace
    t.slices[0].namespace += "n"
    with pytest.raises(TickDecodeError, match="slice.namespace: a value of 64 bytes, over the 63-byte maximum"):
        decode(encode_ticks([t]))


def test_a_mangled_message_is_a_decode_error_or_a_tick_never_anything_else():
    import random

    from slicemeter.tick import TickBatch, TickDecodeError, decode

    good = encode_ticks([honest("node-a", i) for i in range(3)])
    rng = random.Random(7)
    outcomes = {"decoded": 0, "refused": 0}
    for _ in range(400):
        mangled = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            mangled[rng.randrange(len(mangled))] = rng.randrange(256)
        try:
            assert isinstance(decode(bytes(mangled)), TickBatch)
            outcomes["decoded"] += 1
        except TickDecodeError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == 400
