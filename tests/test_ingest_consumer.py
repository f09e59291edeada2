"""The ingest consumer against the real Tansu broker: exactly once across SIGKILLs,
dead letters, consumer-group sharing, snapshot and metrics."""
from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from ingest import store
from ingest.consumer import IngestConfig, Ingestor
from ingest.metrics import IngestMetrics
from ingest_helpers import SLICEMETER, TOPIC, create_topic, produce_chunks, produce_raw
from slicemeter.broker import free_port
from slicemeter.tick import encode_tables
from synth_ticks import SynthNode, fleet, messages, node_tables

REPO = Path(__file__).resolve().parent.parent
START = 1_800_000_000_000
pytestmark = pytest.mark.broker


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
    return con.execute(store.sql_text("queries/sample_checksum.sql")).fetchone()


def stored_checksum(db: Path) -> tuple[int, int]:
    con = store.connect(db, read_only=True)
    try:
        return con.execute(store.sql_text("queries/sample_checksum.sql")).fetchone()
    finally:
        con.close()


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
                     "--batch-samples", "100000", "--batch-max-seconds", "0.5")
    rng = random.Random(20261129)
    partial = 0
    for _ in range(10):
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            proc.wait(timeout=rng.uniform(1.5, 4.0))  # a random moment (or it finished first)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        samples, _ = stored_checksum(db) if db.exists() else (0, 0)
        partial += 0 < samples < produced
    assert partial >= 3, "the kills should land while the backlog is partly stored"
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert stored_checksum(db) == want


def _msg(node: str, ticks: int = 3) -> bytes:
    g, s = node_tables(SynthNode(node, "https://acme:6443", gpus=1, slices_per_gpu=2), START + 10_000 * __import__("numpy").arange(ticks))
    return encode_tables(g, s)


def test_malformed_and_wrong_version_go_to_dead_letters(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    good = _msg("gpu-node-1")
    wrong_major = good[:4] + struct.pack("<HH", 2, 0) + good[8:]
    produce_raw(broker.bootstrap, [
        (b"gpu-node-1", good), (b"x", b"not a tick at all"), (b"gpu-node-1", wrong_major),
        (b"gpu-node-1", good[:-10]), (b"gpu-node-1", None), (b"gpu-node-2", _msg("gpu-node-2")),
    ])
    ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=tmp_path / "dl.duckdb", group=None, until_idle_s=5))
    ing.run()
    rows = ing.con.execute('SELECT "offset", error, payload IS NOT NULL FROM dead_letters ORDER BY "offset"').fetchall()
    assert [r[0] for r in rows] == [1, 2, 3, 4]
    assert "bad magic" in rows[0][1]
    assert "major version 2" in rows[1][1]
    assert "truncated" in rows[2][1] or "malformed" in rows[2][1]
    assert "empty message" in rows[3][1]
    assert ing.con.execute("SELECT count(DISTINCT node) FROM raw_slice").fetchone() == (2,)  # the rest flowed
    assert ing.con.execute("SELECT next_offset FROM ingest_offsets").fetchall() == [(6,)]
    assert ing.metrics.dead_letters._value.get() == 4


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
