"""Commands that say done only when they are done: an ingest drain (--until-idle) over
every partition of the topic, a store rejection, unmatched clusters, `close` on a file
that is not ingest's store, and an export that cannot write its files."""
from __future__ import annotations

import re
import resource
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from slicemeter import store
from slicemeter.store.reader_file import ReaderFile
from slicemeter.testkit.cb_rows import ACME, add_gpu, add_slice, add_tenants
from slicemeter.testkit.ingest_helpers import (SLICEMETER, create_topic, drain_after_killed_members,
                                               expected_checksum, messages_accounted, produce_chunks,
                                               stored_checksum, wait_for_line)
from slicemeter.testkit.synth_month import synthesize_month
from slicemeter.testkit.synth_ticks import fleet, messages, recent_midnight_ms

REPO = Path(__file__).resolve().parent.parent
START = recent_midnight_ms()


def slicemeter(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*SLICEMETER, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, **kw)


def _assigned(log: Path) -> list[int] | None:
    """The partitions ingest last logged as its own (kafka-python logs assignments too)."""
    lines = [ln for ln in log.read_text().splitlines() if "slicemeter.ingest: assigned partitions [" in ln]
    if not lines:
        return None
    inside = lines[-1].split("assigned partitions [", 1)[1].split("]", 1)[0]
    return [int(x) for x in inside.split(",") if x.strip()]


# ---------------------------------------------------------------- ingest --until-idle

@pytest.mark.broker
def test_a_drain_beside_a_dead_member_names_the_partitions_it_could_not_store(broker, tmp_path):
    """A SIGKILLed member keeps its partitions until its session times out: a drain the
    group gave the other partitions cannot store the dead one's, and says so; once the
    group hands them over, a drain stores every partition."""
    create_topic(broker.bootstrap, partitions=4)
    group = ["--kafka", broker.bootstrap, "--group", "g"]
    member_log, drain_log = tmp_path / "member.log", tmp_path / "drain.log"
    member = subprocess.Popen([*SLICEMETER, "ingest", *group, "--db", str(tmp_path / "member.duckdb"),
                               "--session-timeout-ms", "25000"],
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(member_log, "w"))
    db = tmp_path / "drain.duckdb"
    drain = ["ingest", *group, "--db", str(db), "--session-timeout-ms", "6000"]
    try:
        wait_for_line(member, member_log, "assigned partitions [0, 1, 2, 3]", 1)
        # idle, it waits 2 s (not its default, twice its session timeout) for the dead
        # member's partitions, then gives up naming them
        first = subprocess.Popen([*SLICEMETER, *drain, "--until-idle", "8", "--drain-wait", "2"], cwd=REPO,
                                 stdout=subprocess.DEVNULL,
                                 stderr=open(drain_log, "w"))
        deadline = time.monotonic() + 60
        while not (_assigned(drain_log) and _assigned(member_log) != [0, 1, 2, 3]):   # the group split
            assert time.monotonic() < deadline and first.poll() is None, drain_log.read_text()[-2000:]
            time.sleep(0.05)
        held_by_dead = _assigned(member_log)
    finally:
        member.send_signal(signal.SIGKILL)
        member.wait()
    killed_at = time.monotonic()
    chunks = list(messages(fleet(8, [ACME]), START, 20, 10))
    sent, produced = produce_chunks(broker.bootstrap, chunks)
    assert first.wait(timeout=60) == 1, drain_log.read_text()[-3000:]
    assert time.monotonic() - killed_at < 25, "the dead member's session ended during the first drain"
    text = drain_log.read_text()
    assert re.search(r"drain idle, waiting up to 2 s for partitions \[[\d, ]+\] held by other members", text), text[-3000:]
    left = re.findall(r"drain incomplete: partition slicemeter\.ticks/(\d) stored up to offset 0 of (\d+)", text)
    # the dead member's partitions that have records, each named with its high watermark:
    # with what the drain stored, every message of the topic
    assert left and {int(p) for p, _ in left} <= set(held_by_dead), text[-3000:]
    con = store.connect(db, read_only=True)
    stored_messages = con.execute("SELECT sum(next_offset) FROM ingest_offsets").fetchone()[0]
    con.close()
    assert stored_messages + sum(int(hw) for _, hw in left) == sent
    assert 0 < stored_checksum(db)[0] < produced

    # the dead member's session ends, the group hands its partitions over
    second = slicemeter(*drain, "--until-idle", "60")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "drain incomplete" not in second.stderr
    assert stored_checksum(db) == expected_checksum(chunks)


@pytest.mark.broker
# twice killed once they hold partitions; once 1-4.5 s after each start, joining (Tansu
# answers a member's first JoinGroup about 5 s after it asks, so none holds partitions yet)
@pytest.mark.parametrize("kill_after", [None, None, [1.2, 2.3, 3.4, 4.5]], ids=["assigned", "assigned-2", "timed"])
def test_a_drain_after_members_were_killed_waits_for_their_partitions_and_stores_every_one(broker, tmp_path,
                                                                                           kill_after):
    create_topic(broker.bootstrap, partitions=4)
    chunks = list(messages(fleet(8, [ACME]), START, 20, 10))
    sent, _ = produce_chunks(broker.bootstrap, chunks)
    # the drain waits up to a minute for the dead members' partitions: on a loaded machine the
    # group hands them over later than the default wait (twice the session timeout) allows,
    # and a drain that has every partition ends at once
    rc, log = drain_after_killed_members(broker.bootstrap, tmp_path, kill_after=kill_after, drain_wait=60)
    assert rc == 0, log[-4000:]
    assert "drain incomplete" not in log
    # every partition stored to its end, in the drain's store or (committed) in a dead member's
    assert messages_accounted(broker.bootstrap, tmp_path / "drain.duckdb", "g", 4) == sent


@pytest.mark.broker
def test_a_drain_whose_message_the_store_rejects_exits_non_zero(broker, tmp_path):
    """The store fails every write holding offset 5 (as a failing disk would one
    transaction): the batch is read again message by message, offset 5 is kept as a dead
    letter and the rest stored, and the drain says it did not store everything."""
    create_topic(broker.bootstrap, partitions=1)
    chunks = list(messages(fleet(8, [ACME], gpus=1, slices_per_gpu=2), START, 3, 3))
    produce_chunks(broker.bootstrap, chunks)
    script = tmp_path / "rejecting.py"
    script.write_text(
        "import sys, duckdb\n"
        "from slicemeter.ingest import writer\n"
        "from slicemeter.cli import main\n"
        "real = writer.write_prepared\n"
        "def write(con, batch):\n"
        "    first = next(iter(batch.next_offsets.values())) - batch.messages\n"
        "    if batch.gpu is not None and first <= 5 < first + batch.messages:\n"
        "        raise duckdb.IOException('test: the store cannot write offset 5')\n"
        "    return real(con, batch)\n"
        "writer.write_prepared = write\n"
        "sys.exit(main())\n")
    db = tmp_path / "rej.duckdb"
    run = subprocess.run([str(Path(SLICEMETER[0])), str(script), "ingest", "--kafka", broker.bootstrap, "--db", str(db),
                          "--group", "", "--until-idle", "3"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert "the store rejected slicemeter.ticks/0 offset 5" in run.stderr and "cannot write offset 5" in run.stderr
    assert "1 message(s) rejected by the store" in run.stderr
    con = store.connect(db, read_only=True)
    try:   # what the store took is kept: the other seven messages and the dead letter
        assert con.execute('SELECT "offset" FROM dead_letters').fetchall() == [(5,)]
        assert con.execute("SELECT count(DISTINCT node) FROM raw_gpu").fetchone() == (7,)
    finally:
        con.close()


@pytest.mark.broker
def test_a_single_drain_lists_the_clusters_no_tenant_matches(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    stray = "https://stray-cluster:6443"
    produce_chunks(broker.bootstrap, messages(fleet(2, [ACME, stray], gpus=1, slices_per_gpu=1), START, 4, 4))
    run = slicemeter("ingest", "--kafka", broker.bootstrap, "--db", str(tmp_path / "u.duckdb"), "--group", "",
                     "--until-idle", "3", "--tenants", "examples/demo.yaml")
    assert run.returncode == 0, run.stderr
    done = run.stderr.split("ingest done", 1)[1]
    assert re.search(r"1 stored cluster\(s\) match none and bill as 'unassigned': \S*stray-cluster\S* \(\d+ samples\)",
                     done), run.stderr
    assert "acme" not in done.split("unassigned", 1)[1]


@pytest.mark.broker
def test_a_static_member_joins_under_its_instance_id_and_drains(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=2)
    chunks = list(messages(fleet(4, [ACME], gpus=1, slices_per_gpu=1), START, 4, 4))
    produce_chunks(broker.bootstrap, chunks)
    db = tmp_path / "static.duckdb"
    run = slicemeter("ingest", "--kafka", broker.bootstrap, "--db", str(db), "--group", "g", "--instance-id", "ingest-0",
                     "--session-timeout-ms", "6000", "--until-idle", "3")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "member_id: ingest-0-" in run.stderr   # the broker built its member id from the instance id
    assert stored_checksum(db) == expected_checksum(chunks)

    alone = slicemeter("ingest", "--kafka", broker.bootstrap, "--db", str(db), "--group", "", "--instance-id", "x")
    assert alone.returncode == 2 and "--instance-id needs --group" in alone.stderr, alone.stderr


# ---------------------------------------------------------------- close

def _store_with_october(db: Path) -> None:
    con = store.connect(db)
    add_tenants(con)
    for h in range(3):
        add_gpu(con, hour=f"2026-10-31 2{h}:00:00")
        add_slice(con, "a", alloc=0.5, hour=f"2026-10-31 2{h}:00:00", cluster=ACME)
    con.close()


def _closed(db: Path) -> list:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT month FROM closed_months").fetchall()
    finally:
        con.close()


def test_close_refuses_the_readers_file_and_closes_the_store(tmp_path):
    live, readers = tmp_path / "live.duckdb", tmp_path / "readers.duckdb"
    _store_with_october(live)
    con = store.connect(live)
    ReaderFile(con, readers).refresh()
    con.close()
    before = readers.read_bytes()

    refused = slicemeter("close", "--db", str(readers), "--month", "2026-10")
    assert refused.returncode == 2, refused.stderr
    assert f"--db: {readers} is not ingest's store" in refused.stderr and "closed" not in refused.stdout
    assert readers.read_bytes() == before and _closed(readers) == []

    done = slicemeter("close", "--db", str(live), "--month", "2026-10")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "closed 2026-10" and len(_closed(live)) == 1


def test_close_refuses_a_file_that_is_no_store_and_leaves_it_as_it_was(tmp_path):
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE notes AS SELECT 1 AS n")
    con.close()
    refused = slicemeter("close", "--db", str(other), "--month", "2026-10")
    assert refused.returncode == 2 and f"--db: {other} is not ingest's store" in refused.stderr, refused.stderr
    con = duckdb.connect(str(other), read_only=True)
    assert [r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()] == ["notes"]
    con.close()

    text = tmp_path / "text.duckdb"
    text.write_text("not a database\n" * 100)
    refused = slicemeter("close", "--db", str(text), "--month", "2026-10")
    assert refused.returncode == 2 and f"--db: cannot open {text} as a DuckDB store" in refused.stderr, refused.stderr
    assert text.read_text() == "not a database\n" * 100


# ---------------------------------------------------------------- export

def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _file_size_limit(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails (EFBIG) instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_an_export_that_cannot_write_its_files_keeps_the_previous_ones(tmp_path):
    db, out = tmp_path / "m.duckdb", tmp_path / "out"
    con = store.connect(db)
    synthesize_month(con, "2026-11", gpus=10, tenants=2, seed=3)
    con.close()
    assert slicemeter("export", "--db", str(db), "--month", "2026-11", "--out", str(out)).returncode == 0
    before = _files(out)
    limit = 30_000   # the invoice, the detail and FOCUS Parquet fit; the FOCUS CSV does not
    assert len(before["invoice-2026-11.csv"]) < limit < len(before["focus-2026-11.csv"])

    # another basis: every file would change
    failed = slicemeter("export", "--db", str(db), "--month", "2026-11", "--out", str(out), "--basis", "usage",
                        preexec_fn=_file_size_limit(limit))
    assert _files(out) == before   # no part-written file, no temporary one left
    assert failed.returncode == 1, failed.stderr
    assert "not written: " in failed.stderr and "focus-2026-11.csv" in failed.stderr, failed.stderr
    assert "detail-2026-11.parquet" in failed.stderr and "unchanged" in failed.stderr

    again = slicemeter("export", "--db", str(db), "--month", "2026-11", "--out", str(out), "--basis", "usage")
    assert again.returncode == 0, again.stderr
    after = _files(out)
    assert sorted(after) == sorted(before) and after["invoice-2026-11.csv"] != before["invoice-2026-11.csv"]


class _MetadataNamingNoPartition:
    """A consumer of a group holding partition 2, caught up on it, whose broker's metadata
    names no partition of the topic (a loaded broker's answer)."""

    def partitions_for_topic(self, topic):
        return set()

    def assignment(self):
        from kafka import TopicPartition

        return {TopicPartition("slicemeter.ticks", 2)}

    def highwater(self, tp):
        return 5


def test_a_drain_never_takes_metadata_naming_no_partition_for_a_topic_stored_to_its_end():
    """Taken for a topic without partitions, such an answer would end a drain beside dead
    members at once, and its exit status would say nothing of their partitions."""
    from slicemeter.ingest.consumer import IngestConfig, Ingestor

    drain = Ingestor.__new__(Ingestor)   # the drain's decisions alone: no store, no broker
    drain.cfg = IngestConfig(bootstrap="127.0.0.1:9", db=Path("unused.duckdb"), group="g", until_idle_s=1)
    drain.consumer, drain._next, drain.first_record_at = _MetadataNamingNoPartition(), {2: 5}, 0.0
    drain._others_checked_at, drain.store_rejected, drain.records_gone = float("-inf"), [], []
    assert not drain._caught_up()
    assert drain._held_by_others() is None
    assert drain.unstored() is None and drain.drain_result() == 1
