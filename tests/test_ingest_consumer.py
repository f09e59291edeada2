"""The ingest consumer against the real Tansu broker: exactly once across SIGKILLs,
dead letters, consumer-group sharing, snapshot and metrics."""
from __future__ import annotations

import random
import struct
import subprocess
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from slicemeter import store
from slicemeter.ingest.consumer import IngestConfig, Ingestor
from slicemeter.testkit.ingest_helpers import (SLICEMETER, create_topic, expected_checksum, produce_chunks, produce_raw,
                                               sigkill_within, stored_checksum, wait_for_line)
from slicemeter.tick import encode_tables
from slicemeter.testkit.synth_ticks import SynthNode, fleet, messages, node_tables, recent_midnight_ms

REPO = Path(__file__).resolve().parent.parent
START = recent_midnight_ms()
pytestmark = pytest.mark.broker


def ingest_cmd(bootstrap: str, db: Path, *extra: str) -> list[str]:
    return [*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", str(db), *extra]


def test_sigkill_at_random_moments_loses_and_duplicates_nothing(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=4)
    chunks = list(messages(fleet(40, ["https://acme:6443", "https://beta:6443"]), START, 1250, 125))
    _, produced = produce_chunks(broker.bootstrap, chunks)
    assert produced == 1_000_000
    want = expected_checksum(chunks)
    db = tmp_path / "crash.duckdb"
    cmd = ingest_cmd(broker.bootstrap, db, "--group", "", "--until-idle", "5",
                     "--batch-samples", "25000", "--batch-max-seconds", "0.5")
    rng = random.Random(20261129)
    kills, progress = 0, []
    for i in range(10):
        log = tmp_path / f"run{i}.log"
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
        # a random moment while batches are being stored: after 1-2 stored batches, plus
        # up to 0.6 s (mid-fetch, mid-decode or mid-transaction)
        if wait_for_line(proc, log, "stored batch", rng.randint(1, 2)):
            kills += sigkill_within(proc, rng.uniform(0.0, 0.6))
        progress.append(stored_checksum(db)[0])
    assert kills >= 8, f"only {kills} runs were killed mid-ingest; progress {progress}"
    assert 0 < progress[0] < produced and progress == sorted(progress)
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert stored_checksum(db) == want
    # the hour rollups, folded from deltas that kills left pending, count every sample once
    con = store.connect(db, read_only=True)
    try:
        hours = con.execute("SELECT (SELECT sum(sample_count) FROM gpu_hour), (SELECT sum(sample_count) FROM slice_hour), "
                            "(SELECT count(*) FROM gpu_hour_pending) + (SELECT count(*) FROM slice_hour_pending)").fetchone()
    finally:
        con.close()
    assert hours == (sum(g.num_rows for _, g, _ in chunks), sum(s.num_rows for _, _, s in chunks), 0)


def _msg(node: str, ticks: int = 3, start: int = START) -> bytes:
    g, s = node_tables(SynthNode(node, "https://acme:6443", gpus=1, slices_per_gpu=2), start + 10_000 * np.arange(ticks))
    return encode_tables(g, s)


def test_malformed_and_wrong_version_go_to_dead_letters(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    good = _msg("gpu-node-1")
    wrong_major = good[:4] + struct.pack("<HH", 2, 0) + good[8:]
    produce_raw(broker.bootstrap, [
        (b"gpu-node-1", good), (b"x", b"not a tick at all"), (b"gpu-node-1", wrong_major),
        (b"gpu-node-1", good[:-10]), (b"gpu-node-1", None), (b"gpu-node-2", _msg("gpu-node-2")),
        # decodes fine, but no store can bucket a timestamp 146 million years out
        (b"gpu-node-3", _msg("gpu-node-3", start=2**62)), (b"gpu-node-4", _msg("gpu-node-4")),
    ])
    ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=tmp_path / "dl.duckdb", group=None, until_idle_s=5))
    ing.run()
    rows = ing.con.execute('SELECT "offset", error, payload IS NOT NULL FROM dead_letters ORDER BY "offset"').fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4, 6], rows
    assert "bad magic" in rows[0][1]
    assert "major version 2" in rows[1][1]
    assert "truncated" in rows[2][1] or "malformed" in rows[2][1]
    assert "empty message" in rows[3][1]
    assert "outside the accepted window" in rows[4][1]   # refused before the store sees it
    nodes = ing.con.execute("SELECT DISTINCT node FROM raw_slice ORDER BY node").fetchall()
    assert nodes == [("gpu-node-1",), ("gpu-node-2",), ("gpu-node-4",)]  # the rest flowed
    assert ing.con.execute("SELECT count(*) FROM slice_hour WHERE node = 'gpu-node-3'").fetchone() == (0,)
    assert ing.con.execute("SELECT next_offset FROM ingest_offsets").fetchall() == [(8,)]
    assert ing.metrics.dead_letters._value.get() == 5
    assert ing.samples_written == 3 * 3 * 3  # three good messages of 3 Ticks x (1 GPU + 2 slices)


def test_a_batch_the_store_rejects_is_read_again_message_by_message(broker, tmp_path, monkeypatch):
    """The writer's transaction fails for a whole batch: its messages are read from Kafka
    again, one per transaction; only the one the store rejects again is a dead letter."""
    from slicemeter.ingest import writer

    create_topic(broker.bootstrap, partitions=1)
    produce_raw(broker.bootstrap, [(f"gpu-node-{i}".encode(), _msg(f"gpu-node-{i}")) for i in range(8)])
    real_write = writer.write_prepared
    calls = []

    def write_failing_on_offset_5(con, batch):
        (first_offset_after,) = batch.next_offsets.values()
        covers_5 = first_offset_after - batch.messages <= 5 < first_offset_after
        calls.append((batch.messages, covers_5))
        if covers_5 and batch.gpu is not None:
            raise duckdb.ConstraintException("test: the store refuses offset 5")
        return real_write(con, batch)

    monkeypatch.setattr(writer, "write_prepared", write_failing_on_offset_5)
    ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=tmp_path / "rej.duckdb", group=None, until_idle_s=5))
    ing.run()
    assert calls[0] == (8, True)                 # first as one batch ...
    assert (1, True) in calls[1:]                # ... then offset 5 on its own
    rows = ing.con.execute('SELECT "offset", error, octet_length(payload) FROM dead_letters').fetchall()
    assert [(r[0], "refuses offset 5" in r[1], r[2] > 0) for r in rows] == [(5, True, True)]
    nodes = [r[0] for r in ing.con.execute("SELECT DISTINCT node FROM raw_gpu ORDER BY node").fetchall()]
    assert nodes == [f"gpu-node-{i}" for i in range(8) if i != 5]
    assert ing.samples_written == 7 * 3 * 3
    assert ing.con.execute("SELECT count(*) FROM raw_slice").fetchone() == (7 * 3 * 2,)
    assert ing.con.execute("SELECT next_offset FROM ingest_offsets").fetchall() == [(8,)]


def test_running_out_of_memory_is_not_a_dead_letter(broker, tmp_path, monkeypatch):
    """DuckDB's memory limit is no verdict on the data: a batch that runs out of memory is
    read again message by message, and a message that still does stops the ingest."""
    from slicemeter.ingest import writer

    create_topic(broker.bootstrap, partitions=1)
    produce_raw(broker.bootstrap, [(f"gpu-node-{i}".encode(), _msg(f"gpu-node-{i}")) for i in range(3)])

    real_write = writer.write_prepared
    sizes = []

    def out_of_memory(con, batch):
        sizes.append(batch.messages)
        if batch.gpu is not None:
            raise duckdb.OutOfMemoryException("test: could not allocate block")
        return real_write(con, batch)

    monkeypatch.setattr(writer, "write_prepared", out_of_memory)
    ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=tmp_path / "oom.duckdb", group=None, until_idle_s=5))
    with pytest.raises(RuntimeError, match="does not fit DuckDB's memory limit.*raise --duckdb-memory"):
        ing.run()
    assert sizes == [3, 1]   # the batch, then its first message on its own
    assert ing.con.execute("SELECT count(*) FROM dead_letters").fetchone() == (0,)
    assert ing.con.execute("SELECT count(*) FROM raw_gpu_rows").fetchone() == (0,)


def _assigned(log: Path) -> list[int] | None:
    text = log.read_text() if log.exists() else ""
    lines = [ln for ln in text.splitlines() if "assigned partitions" in ln]
    if not lines:
        return None
    inside = lines[-1].split("assigned partitions [", 1)[1].split("]", 1)[0]
    return [int(x) for x in inside.split(",") if x.strip()]


def test_two_consumers_in_one_group_share_partitions(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=4)
    procs, logs, dbs = [], [], []
    for i in range(2):
        dbs.append(tmp_path / f"worker{i}.duckdb")
        logs.append(tmp_path / f"worker{i}.log")
        procs.append(subprocess.Popen(
            ingest_cmd(broker.bootstrap, dbs[i], "--group", "shared", "--until-idle", "20",
                       "--session-timeout-ms", "6000"),
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(logs[i], "w")))
    try:
        deadline = time.monotonic() + 40
        while True:  # both members joined and the group settled on a split
            a, b = _assigned(logs[0]), _assigned(logs[1])
            if a and b and sorted(a + b) == [0, 1, 2, 3]:
                break
            assert time.monotonic() < deadline, f"no split: {a} {b}"
            procs[0].wait(timeout=0.2) if procs[0].poll() is None else None
    except subprocess.TimeoutExpired:
        pass
    chunks = list(messages(fleet(16, ["https://acme:6443"]), START, 40, 20))
    _, produced = produce_chunks(broker.bootstrap, chunks)
    for p in procs:
        assert p.wait(timeout=60) == 0
    got = [stored_checksum(db) for db in dbs]
    parts = [set(r[0] for r in duckdb.connect(str(db), read_only=True).execute(
        'SELECT "partition" FROM ingest_offsets').fetchall()) for db in dbs]
    assert parts[0] and parts[1] and not parts[0] & parts[1]
    assert got[0][0] > 0 and got[1][0] > 0
    want = expected_checksum(chunks)
    assert (got[0][0] + got[1][0], got[0][1] + got[1][1]) == want


def test_a_rejected_folding_batch_leaves_no_deltas_for_the_readers_copy(broker, tmp_path, monkeypatch):
    """Batches leave rollup deltas for a later one to fold; when the store rejects that one
    (say, out of memory once), its messages are stored one by one and the earlier deltas are
    still folded before the readers' copy, which refuses a store with deltas pending."""
    from slicemeter.ingest import writer

    create_topic(broker.bootstrap, partitions=1)
    produce_raw(broker.bootstrap, [(f"gpu-node-{i}".encode(), _msg(f"gpu-node-{i}")) for i in range(6)])
    real_write = writer.write_prepared
    folds = []

    def fail_the_first_fold(con, batch):
        if batch.fold_rollups and batch.gpu is not None and not folds:
            folds.append(batch.messages)
            raise duckdb.OutOfMemoryException("test: the fold ran out of memory")
        return real_write(con, batch)

    monkeypatch.setattr(writer, "write_prepared", fail_the_first_fold)
    snapshot = tmp_path / "readers.duckdb"
    ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=tmp_path / "fold.duckdb", group=None, until_idle_s=5,
                                batch_samples=9, fold_every_batches=3, snapshot=snapshot, snapshot_interval_s=0.0))
    ing.run()
    assert folds, "no folding batch was rejected: the test did not reach its case"
    assert ing.con.execute("SELECT (SELECT count(*) FROM gpu_hour_pending) + (SELECT count(*) FROM "
                           "slice_hour_pending)").fetchone() == (0,)
    assert ing.con.execute("SELECT count(DISTINCT node) FROM raw_gpu").fetchone() == (6,)
    assert snapshot.exists()
