"""`slicemeter backup` while ingest writes, and the restore of docs/operations.md: ingest on
the restored copy replays the topic from the copy's offsets, nothing lost or counted twice."""
from __future__ import annotations

import shutil
import signal
import subprocess
import threading
from datetime import datetime, timezone
from pathlib import Path

import duckdb
import pytest

from slicemeter.store import backup
from slicemeter.testkit.cb_rows import ACME
from slicemeter.testkit.ingest_helpers import (SLICEMETER, create_topic, expected_checksum, produce_chunks,
                                               stored_checksum, wait_for_line)
from slicemeter.testkit.synth_ticks import fleet, messages, recent_midnight_ms

REPO = Path(__file__).resolve().parent.parent
TENANTS = str(REPO / "examples/demo.yaml")


def slicemeter(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*SLICEMETER, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def drain(bootstrap: str, db: Path) -> None:
    done = slicemeter("ingest", "--kafka", bootstrap, "--db", str(db), "--group", "", "--tenants", TENANTS,
                      "--until-idle", "3")
    assert done.returncode == 0, done.stderr[-3000:]


def invoice(db: Path, month: str, out: Path) -> str:
    done = slicemeter("export", "--db", str(db), "--month", month, "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return (out / f"invoice-{month}.csv").read_text()


@pytest.mark.broker
def test_a_backup_taken_while_ingest_writes_restores_to_the_same_samples_and_bills(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=4)
    start = recent_midnight_ms()
    chunks = list(messages(fleet(8, [ACME]), start, 360, 10))
    parts = [chunks[: len(chunks) // 3], chunks[len(chunks) // 3: 2 * len(chunks) // 3], chunks[2 * len(chunks) // 3:]]
    produce_chunks(broker.bootstrap, parts[0])
    db, log = tmp_path / "store.duckdb", tmp_path / "ingest.log"
    ingest = subprocess.Popen([*SLICEMETER, "ingest", "--kafka", broker.bootstrap, "--db", str(db), "--group", "",
                               "--tenants", TENANTS, "--batch-samples", "20000"],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        wait_for_line(ingest, log, "slicemeter.ingest: stored batch", 1, deadline_s=120)
        # the copy is taken while more records arrive and ingest stores them
        producing = threading.Thread(target=produce_chunks, args=(broker.bootstrap, parts[1]))
        producing.start()
        taken = slicemeter("backup", "--db", str(db), "--out", str(tmp_path / "backup"))
        producing.join()
        assert taken.returncode == 0, taken.stdout + taken.stderr
        assert "held by a running ingest; asked it for the copy" in taken.stdout
        assert "backup: copying the store to" in log.read_text()
    finally:
        ingest.send_signal(signal.SIGTERM)
        assert ingest.wait(timeout=120) == 0, log.read_text()[-3000:]
    produce_chunks(broker.bootstrap, parts[2])
    drain(broker.bootstrap, db)   # the store that never stopped
    want = expected_checksum(chunks)
    assert stored_checksum(db) == want

    copy = tmp_path / "backup" / "store.duckdb"
    with duckdb.connect(str(copy), read_only=True) as con:
        held = con.execute("SELECT sum(next_offset) FROM ingest_offsets").fetchone()[0]
    assert 0 < held < len(chunks)   # the copy holds part of the topic: the restore replays the rest
    restored = tmp_path / "restored" / "store.duckdb"
    restored.parent.mkdir()
    shutil.copyfile(copy, restored)
    drain(broker.bootstrap, restored)
    assert stored_checksum(restored) == want
    month = datetime.fromtimestamp(start / 1000, timezone.utc).strftime("%Y-%m")
    assert invoice(restored, month, tmp_path / "x1") == invoice(db, month, tmp_path / "x2")


def test_a_backup_of_a_store_no_ingest_holds_is_taken_by_the_command_itself(tmp_path):
    from slicemeter import store

    db = tmp_path / "store.duckdb"
    store.connect(db).close()
    taken = slicemeter("backup", "--db", str(db), "--out", str(tmp_path / "b"))
    assert taken.returncode == 0, taken.stderr
    assert "asked it" not in taken.stdout
    with duckdb.connect(str(tmp_path / "b" / "store.duckdb"), read_only=True) as con:
        # a store, keys and all: `close` takes it for ingest's own (sql/chargeback/ingest_store.sql)
        assert con.execute(store.sql_text("chargeback/ingest_store.sql")).fetchone()[0]
    assert not backup.result_path(tmp_path / "b" / "store.duckdb").exists()
    again = slicemeter("backup", "--db", str(db), "--out", str(tmp_path))
    assert again.returncode == 2 and "would replace the store itself" in again.stderr


def test_a_drain_names_the_records_kafka_no_longer_holds_and_exits_1(tmp_path, caplog):
    """A store restored from a backup older than the topic's retention: the record after its
    offset is gone, the log starts further on. Tansu cannot move a log start (no
    delete_records, no retention), so the consumer is handed that first record directly."""
    from slicemeter.ingest.consumer import IngestConfig, Ingestor
    from slicemeter.ingest.writer import record_digest

    ingestor = Ingestor(IngestConfig(bootstrap="127.0.0.1:9", db=tmp_path / "s.duckdb", group=None, until_idle_s=1))
    try:
        ingestor._verify[("slicemeter.ticks", 2)] = (4, record_digest(b"k", b"the record at 4"))
        assert ingestor._check_resume("slicemeter.ticks", 2, 9, b"k", b"the record at 9", 9) is False
        ingestor.unstored = lambda: []   # every partition read to its end since
        assert ingestor.drain_result() == 1
    finally:
        ingestor.con.close()
    assert "partition slicemeter.ticks/2 offsets 5..8 are gone from Kafka" in caplog.text
    assert "1 range(s) gone from Kafka" in caplog.text


def test_a_log_that_starts_at_the_stored_offset_has_lost_nothing(tmp_path):
    """The record below the stored offset deleted, the next one there: nothing ingest had
    not stored is gone, and a drain may exit 0."""
    from slicemeter.ingest.consumer import IngestConfig, Ingestor
    from slicemeter.ingest.writer import record_digest

    ingestor = Ingestor(IngestConfig(bootstrap="127.0.0.1:9", db=tmp_path / "s.duckdb", group=None, until_idle_s=1))
    try:
        ingestor._verify[("slicemeter.ticks", 2)] = (4, record_digest(b"k", b"the record at 4"))
        assert ingestor._check_resume("slicemeter.ticks", 2, 5, b"k", b"the record at 5", 5) is False
        assert ingestor.records_gone == []
        ingestor.unstored = lambda: []
        assert ingestor.drain_result() == 0
    finally:
        ingestor.con.close()
