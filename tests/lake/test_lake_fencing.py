"""Fencing on a DuckLake (docs/lake.md, Fencing): a worker stores a partition's batch only
while it owns the partition, checked in the batch's own lake commit, so two workers on one
topic (a rolling update with `--group ''`, a worker paused past its session) never store a
record twice: the lake bills what a plain file on the same topic bills, to the cent."""
from __future__ import annotations

import random
import signal
import subprocess
import threading
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from slicemeter import store
from slicemeter.ingest import consumer
from slicemeter.ingest.consumer import IngestConfig, Ingestor
from slicemeter.ingest.metrics import IngestMetrics
from slicemeter.ingest.writer import LakeCommitLost, foreign_owners, take_partitions, write_lake
from slicemeter.store.script import execute_script
from slicemeter.testkit.ingest_helpers import (SLICEMETER, TOPIC, create_topic, poll, produce_chunks,
                                               wait_for_line)
from slicemeter.testkit.synth_ticks import fleet, messages, recent_midnight_ms

REPO = Path(__file__).resolve().parents[2]
START = recent_midnight_ms()
CLUSTERS = ["https://acme:6443", "https://beta:6443"]
CATALOG = """tenants:
  - {name: acme, api_server: "https://acme:6443"}
  - {name: beta, api_server: "https://beta:6443"}
"""


def _owners(partitions: dict[int, int], owner: str) -> pa.Table:
    return pa.table({"topic": pa.array([TOPIC] * len(partitions), pa.string()),
                     "partition": pa.array(list(partitions), pa.int32()),
                     "epoch": pa.array(list(partitions.values()), pa.int64()),
                     "owner": pa.array([owner] * len(partitions), pa.string())})


def test_a_take_over_fences_the_batch_before_and_the_one_in_flight(lake_db):
    """Epochs go up at each take-over; a batch of the worker taken from finds it before its
    transaction (the check) or fails at its commit (a take-over committed during it)."""
    target, _ = lake_db
    a, b = store.connect(target), store.connect(target)
    try:
        mine = take_partitions(a, TOPIC, [0, 1], "a")
        assert mine == {0: 1, 1: 1}
        assert take_partitions(b, TOPIC, [0], "b") == {0: 2}
        assert foreign_owners(a, _owners(mine, "a")) == {0: ("b", 2)}     # the check before a batch
        assert foreign_owners(a, _owners({1: 1}, "a")) == {}
        # a batch of `a` on partition 1 in flight while `b` takes partition 1 over
        a.execute("BEGIN TRANSACTION")
        assert foreign_owners(a, _owners({1: 1}, "a")) == {}
        with store.registered(a, batch_owners=_owners({1: 1}, "a")):
            execute_script(a, "lake/save_owners.sql", {})
        a.execute("INSERT INTO lake.main.ingest_offsets VALUES (?, 1, 100, NULL)", [TOPIC])
        assert take_partitions(b, TOPIC, [1], "b") == {1: 2}
        with pytest.raises(duckdb.TransactionException, match="[Cc]onflict"):
            a.execute("COMMIT")
        assert a.execute("SELECT count(*) FROM ingest_offsets").fetchone() == (0,)
        # two take-overs at once: one waits for the other's commit, and epochs stay apart
        results: list[dict] = []
        threads = [threading.Thread(target=lambda con, who: results.append(take_partitions(con, TOPIC, [0, 1], who)),
                                    args=(con, who)) for con, who in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert sorted(r[0] for r in results) == [3, 4] and sorted(r[1] for r in results) == [3, 4]
        latest = a.execute('SELECT "partition", epoch FROM ingest_partition_owner ORDER BY 1').fetchall()
        assert latest == [(0, 4), (1, 4)]
    finally:
        a.close()
        b.close()


@pytest.mark.broker
def test_a_fenced_worker_without_a_group_says_so_on_metrics_and_stops(broker, lake_db):
    """In process: a worker whose partitions another one takes drops what it holds, logs
    it, counts the partitions on /metrics and stops with 1."""
    target, _ = lake_db
    create_topic(broker.bootstrap, partitions=2)
    chunks = list(messages(fleet(4, CLUSTERS), START, 240, 30))
    produce_chunks(broker.bootstrap, chunks[: len(chunks) // 2])
    metrics = IngestMetrics()
    ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=target, group=None, batch_samples=2000,
                                batch_max_s=0.2), metrics=metrics)
    result: list[int] = []
    runner = threading.Thread(target=lambda: result.append(ing.run()), daemon=True)
    runner.start()
    poll(lambda: ing.samples_written > 0, "the worker's first stored batch", timeout=120)
    other = store.connect(target)
    try:
        taken = take_partitions(other, TOPIC, [0, 1], "the-new-worker")
    finally:
        other.close()
    produce_chunks(broker.bootstrap, chunks[len(chunks) // 2:])
    runner.join(timeout=120)
    assert result == [1]
    assert metrics.registry.get_sample_value("slicemeter_ingest_fenced_partitions_total") >= 1
    con = store.connect(target, read_only=True)
    try:
        # nothing stored after the take-over: the offsets are where the new worker found them
        owners = con.execute('SELECT "partition", epoch, owner FROM ingest_partition_owner ORDER BY 1').fetchall()
    finally:
        con.close()
    assert owners == [(p, taken[p], "the-new-worker") for p in (0, 1)]


@pytest.mark.broker
def test_batches_a_concurrent_commit_drops_before_any_stored_offset_are_read_again(broker, lake_db, monkeypatch):
    """The first batch of partitions with no stored offset yet loses its commit to a
    concurrent one (a take-over of other partitions, `bindings move`), with the batch behind
    it and the one being filled: each partition is read again from the first record of
    those dropped, not from where reading had got to, so the lake stores every sample."""
    target, _ = lake_db
    create_topic(broker.bootstrap, partitions=2)
    chunks = list(messages(fleet(8, CLUSTERS), START, 240, 30))
    produced = produce_chunks(broker.bootstrap, chunks)[1]
    dropped: list[dict] = []

    def first_commit_lost(con, batch):
        if not dropped and batch.next_offsets:
            dropped.append(dict(batch.first_offsets))
            raise LakeCommitLost({}, "a concurrent commit conflicted")
        return write_lake(con, batch)

    monkeypatch.setattr(consumer, "write_lake", first_commit_lost)
    # in a group: there a partition with no stored offset is left at the client's position
    # (without one, ingest itself seeks it to the log start every time)
    ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=target, group="first-batches", batch_samples=6000,
                                batch_max_s=0.2, until_idle_s=5))
    assert ing.run() == 0
    assert dropped and all(offset == 0 for offset in dropped[0].values())
    assert _stored_samples(target) == produced


def _worker(bootstrap: str, target: str, log: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", target, "--group", "",
                             "--batch-samples", "4000", "--batch-max-seconds", "0.3", "--catalog-interval", "0",
                             *extra], cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "w"))


def _drain(bootstrap: str, target: str, log: Path, *extra: str) -> None:
    proc = _worker(bootstrap, target, log, "--until-idle", "5", *extra)
    assert proc.wait(timeout=300) == 0, log.read_text()[-3000:]


def _export(db: str, month: str, out: Path) -> dict[str, bytes]:
    done = subprocess.run([*SLICEMETER, "export", "--db", db, "--month", month, "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".csv"}


@pytest.mark.broker
def test_overlapping_and_paused_workers_bill_what_one_file_bills(broker, lake_db, tmp_path):
    """A rolling update with `--group ''`: the new worker starts once the old one stores,
    and the old one is fenced at its next batch and stops. Then the new one is SIGSTOPped
    just after a batch, while records flow (so mostly within its next one), a third
    worker drains the topic, and the stopped one, SIGCONTed with more records to read, is
    fenced too. The lake's month export is the plain file's, byte for byte."""
    target, data = lake_db
    catalog = tmp_path / "tenants.yaml"
    catalog.write_text(CATALOG)
    cat = ("--tenants", str(catalog))
    create_topic(broker.bootstrap, partitions=4)
    chunks = list(messages(fleet(12, CLUSTERS), START, 480, 30))
    parts = [chunks[len(chunks) * i // 4: len(chunks) * (i + 1) // 4] for i in range(4)]
    produce_chunks(broker.bootstrap, parts[0])
    old_log, new_log = tmp_path / "old.log", tmp_path / "new.log"
    old = _worker(broker.bootstrap, target, old_log, "--lake-data", str(data), *cat)
    new = None
    try:
        assert wait_for_line(old, old_log, "stored batch", 1, deadline_s=120), old_log.read_text()[-3000:]
        new = _worker(broker.bootstrap, target, new_log, *cat)
        assert wait_for_line(new, new_log, "took partitions", 1, deadline_s=120), new_log.read_text()[-3000:]
        produce_chunks(broker.bootstrap, parts[1])
        assert old.wait(timeout=120) == 1
        assert "fenced: partition" in old_log.read_text() and "stopping" in old_log.read_text()
        # the new worker stores; stopped just after one of its batches while more arrive
        stored = new_log.read_text().count("stored batch")
        producer = threading.Thread(target=produce_chunks, args=(broker.bootstrap, parts[2]))
        producer.start()
        assert wait_for_line(new, new_log, "stored batch", stored + 1, deadline_s=120)
        try:
            new.wait(timeout=random.Random(20261207).uniform(0.0, 0.3))
        except subprocess.TimeoutExpired:
            pass
        new.send_signal(signal.SIGSTOP)
        producer.join(timeout=120)
        _drain(broker.bootstrap, target, tmp_path / "third.log", *cat)
        produce_chunks(broker.bootstrap, parts[3])
        new.send_signal(signal.SIGCONT)
        assert new.wait(timeout=120) == 1, new_log.read_text()[-3000:]
        assert "fenced: partition" in new_log.read_text()
        _drain(broker.bootstrap, target, tmp_path / "last.log", *cat)
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
    plain = str(tmp_path / "plain.duckdb")
    _drain(broker.bootstrap, plain, tmp_path / "plain.log", *cat)
    con = store.connect(target, read_only=True)
    try:
        lake_samples = con.execute("SELECT (SELECT count(*) FROM raw_gpu_rows) + (SELECT count(*) FROM raw_slice_rows)"
                                   ).fetchone()[0]
        letters = con.execute('SELECT "partition", "offset", error FROM dead_letters ORDER BY ALL').fetchall()
    finally:
        con.close()
    assert lake_samples == sum(g.num_rows + s.num_rows for _, g, s in chunks) and letters == []
    month = pd.Timestamp(START, unit="ms").strftime("%Y-%m")
    lake_out = _export(target, month, tmp_path / "lake-out")
    assert lake_out == _export(plain, month, tmp_path / "file-out")
    assert b"acme" in next(body for name, body in lake_out.items() if name.startswith("invoice-"))


def _holds(log: Path) -> list[int]:
    """The partitions the worker's log last said it was assigned."""
    lines = [ln for ln in log.read_text().splitlines() if "assigned partitions [" in ln]
    if not lines:
        return []
    inside = lines[-1].split("assigned partitions [", 1)[1].split("]", 1)[0]
    return [int(x) for x in inside.split(",") if x.strip()]


def _stored_samples(target: str) -> int:
    con = store.connect(target, read_only=True)
    try:
        return con.execute("SELECT (SELECT count(*) FROM raw_gpu_rows) + (SELECT count(*) FROM raw_slice_rows)"
                           ).fetchone()[0]
    finally:
        con.close()


@pytest.mark.broker
def test_a_group_member_paused_past_its_session_is_fenced_and_rejoins(broker, lake_db, tmp_path):
    """Two workers of a group (dynamic members: docs/operations.md, a frozen static member
    keeps its partitions on Tansu); one SIGSTOPped just after a batch while records flow,
    past its session: the other takes every partition. SIGCONTed, the paused one is fenced
    at the batch it held, says so, and takes partitions again once the group rebalances.
    The lake's export is the plain file's, byte for byte."""
    target, data = lake_db
    catalog = tmp_path / "tenants.yaml"
    catalog.write_text(CATALOG)
    create_topic(broker.bootstrap, partitions=4)
    chunks = list(messages(fleet(12, CLUSTERS), START, 480, 30))
    parts = [chunks[len(chunks) * i // 3: len(chunks) * (i + 1) // 3] for i in range(3)]
    produce_chunks(broker.bootstrap, parts[0])
    group = ("--group", "lake", "--session-timeout-ms", "3000", "--tenants", str(catalog))

    def member(log: Path, *extra: str) -> subprocess.Popen:
        return subprocess.Popen([*SLICEMETER, "ingest", "--kafka", broker.bootstrap, "--db", target, *group,
                                 "--batch-samples", "4000", "--batch-max-seconds", "0.3", "--catalog-interval", "0",
                                 *extra], cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "w"))

    a_log, b_log = tmp_path / "a.log", tmp_path / "b.log"
    a = member(a_log, "--lake-data", str(data))
    b = None
    try:
        assert wait_for_line(a, a_log, "stored batch", 1, deadline_s=120), a_log.read_text()[-3000:]
        b = member(b_log)
        poll(lambda: _holds(b_log) and len(_holds(a_log)) + len(_holds(b_log)) == 4, "the group split in two",
             timeout=120)
        producer = threading.Thread(target=produce_chunks, args=(broker.bootstrap, parts[1]))
        producer.start()
        assert wait_for_line(a, a_log, "stored batch", a_log.read_text().count("stored batch") + 1, deadline_s=120)
        a.send_signal(signal.SIGSTOP)
        poll(lambda: _holds(b_log) == [0, 1, 2, 3], "the other worker holding every partition", timeout=120)
        producer.join(timeout=120)
        produce_chunks(broker.bootstrap, parts[2])
        a.send_signal(signal.SIGCONT)
        poll(lambda: "fenced: partition" in a_log.read_text(), "the paused worker saying it is fenced", timeout=120)
        took = a_log.read_text().count("took partitions")
        poll(lambda: a_log.read_text().count("took partitions") > took, "the paused worker's partitions again",
             timeout=120)
        total = sum(g.num_rows + s.num_rows for _, g, s in chunks)
        poll(lambda: _stored_samples(target) >= total, "every sample in the lake", timeout=300)
        for proc in (a, b):
            proc.send_signal(signal.SIGTERM)
        assert a.wait(timeout=60) == 0 and b.wait(timeout=60) == 0
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
    assert _stored_samples(target) == total
    plain = str(tmp_path / "plain.duckdb")
    _drain(broker.bootstrap, plain, tmp_path / "plain.log", "--tenants", str(catalog))
    month = pd.Timestamp(START, unit="ms").strftime("%Y-%m")
    assert _export(target, month, tmp_path / "lake-out") == _export(plain, month, tmp_path / "file-out")
