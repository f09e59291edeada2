"""DuckLake (store/lake.py): ingest workers of one consumer group writing one lake whose
catalog is a real PostgreSQL cluster (testkit/postgres.py) and whose data is Parquet in a
folder, against the real Tansu broker; readers attaching it read-only meanwhile."""
from __future__ import annotations

import random
import signal
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from kafka import KafkaProducer

from slicemeter import store
from slicemeter.chargeback.bill import chargeback
from slicemeter.dashboard import fmt, money
from slicemeter.store import lake
from slicemeter.testkit import share_oracle
from slicemeter.testkit.dashboard_app import metric, run_app
from slicemeter.testkit.ingest_helpers import (SLICEMETER, TOPIC, create_topic, expected_checksum, produce_chunks,
                                               sigkill_within, wait_for_line)
from slicemeter.testkit.synth_ticks import SynthNode, fleet, messages, node_tables, recent_midnight_ms
from slicemeter.tick import encode_tables

REPO = Path(__file__).resolve().parents[2]
START = recent_midnight_ms()
pytestmark = pytest.mark.broker


def _checksum(con) -> tuple[int, int]:
    return con.execute(store.sql_text("testkit/sample_checksum.sql")).fetchone()


def _frame(con, sql: str, keys: list[str]) -> pd.DataFrame:
    return con.execute(sql).df().sort_values(keys).reset_index(drop=True)


def test_extensions_load_from_the_wheels_by_path():
    con = duckdb.connect()
    lake.load_extensions(con)
    loaded = dict(con.execute("SELECT extension_name, install_mode FROM duckdb_extensions() "
                              "WHERE extension_name IN ('ducklake', 'postgres_scanner') AND loaded").fetchall())
    assert sorted(loaded) == ["ducklake", "postgres_scanner"]
    # loaded from a file: nothing was installed into (or fetched to) DuckDB's extension folder
    assert set(loaded.values()) == {"NOT_INSTALLED"}


def test_a_lake_name_is_validated():
    with pytest.raises(lake.LakeError, match="ducklake:postgres:"):
        store.connect("ducklake:sqlite:/tmp/x.db")
    with pytest.raises(lake.LakeError, match="control character"):
        store.connect("ducklake:postgres:dbname=x\n")


def test_a_reader_cannot_write_the_lake(lake_db):
    target, _ = lake_db
    con = store.connect(target, read_only=True)
    try:
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute("INSERT INTO dead_letters (topic) VALUES ('x')")
    finally:
        con.close()


def test_appends_commit_side_by_side_and_a_delete_beside_them_conflicts(lake_db):
    """Why workers only append (sql/lake/views.sql): two transactions inserting into one
    table both commit; a delete from a table another transaction inserted into fails."""
    target, _ = lake_db
    a, b = store.connect(target), store.connect(target)
    try:
        for con in (a, b):
            con.execute("BEGIN TRANSACTION")
            con.execute("INSERT INTO lake.main.ingest_offsets VALUES ('t', 0, 5, NULL)")
        a.execute("COMMIT")
        b.execute("COMMIT")
        b.execute("BEGIN TRANSACTION")
        b.execute("DELETE FROM lake.main.ingest_offsets")
        a.execute("INSERT INTO lake.main.ingest_offsets VALUES ('t', 1, 7, NULL)")
        with pytest.raises(duckdb.TransactionException, match="[Cc]onflict"):
            b.execute("COMMIT")
        assert a.execute("SELECT count(*) FROM lake.main.ingest_offsets").fetchone() == (3,)
    finally:
        a.close()
        b.close()


def test_a_partitions_offset_is_its_latest_commit(lake_db):
    """Offsets are appended; a partition read again from a replaced log's start restarts
    lower, and that later row wins over the higher one before it."""
    from slicemeter.ingest.writer import reset_offset

    target, _ = lake_db
    con = store.connect(target)
    try:
        con.execute("INSERT INTO lake.main.ingest_offsets VALUES ('t', 0, 40, NULL), ('t', 1, 9, NULL)")
        con.execute("INSERT INTO lake.main.ingest_offsets VALUES ('t', 0, 50, NULL)")
        assert con.execute("SELECT next_offset FROM ingest_offsets WHERE \"partition\" = 0").fetchone() == (50,)
        reset_offset(con, "t", 0, 0, 50, 0, 3, "the log was replaced", "lake/reset_offset.sql")
        rows = con.execute('SELECT "partition", next_offset FROM ingest_offsets ORDER BY 1').fetchall()
        assert rows == [(0, 0), (1, 9)]
        assert con.execute("SELECT reason FROM ingest_offset_events").fetchall() == [("the log was replaced",)]
    finally:
        con.close()


def _assignments(log: Path) -> list[list[int]]:
    lines = [ln for ln in log.read_text().splitlines() if "assigned partitions [" in ln] if log.exists() else []
    return [[int(x) for x in ln.split("assigned partitions [", 1)[1].split("]", 1)[0].split(",") if x.strip()]
            for ln in lines]


def _wait_for_partitions(proc: subprocess.Popen, log: Path, want: list[int] | None = None,
                         deadline_s: float = 120, times: int = 1) -> None:
    """Poll the worker's log until the group has given it partitions (`want`: these, for the
    `times`-th time in its log: a worker logs giving partitions up when it next polls, so its
    last line may still be the assignment before)."""
    def given() -> bool:
        found = _assignments(log)
        last = found[-1] if found else []
        return last == want and found.count(want) >= times if want is not None else bool(last)

    deadline = time.monotonic() + deadline_s
    while not given():
        assert time.monotonic() < deadline, f"no partitions in {deadline_s} s:\n{log.read_text()[-2000:]}"
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.05)


def test_two_workers_one_killed_at_random_moments_lose_and_double_nothing(broker, lake_db, tmp_path, monkeypatch):
    """Each kill follows a batch the killed worker stored from data produced after it was
    given partitions, so both kills land while it writes, whatever the machine's speed."""
    target, data = lake_db
    create_topic(broker.bootstrap, partitions=4)
    chunks = list(messages(fleet(24, ["https://acme:6443", "https://beta:6443"]), START, 960, 30))
    by_node: dict[str, list] = {}
    for chunk in chunks:
        by_node.setdefault(chunk[0], []).append(chunk)
    # three parts, each node's messages in time order across them
    parts = [[c for node in by_node.values() for c in node[len(node) * i // 3:len(node) * (i + 1) // 3]]
             for i in range(3)]
    want = expected_checksum(chunks)
    cmd = [*SLICEMETER, "ingest", "--kafka", broker.bootstrap, "--db", target, "--lake-data", str(data),
           "--group", "lake", "--session-timeout-ms", "3000", "--batch-samples", "20000",
           "--batch-max-seconds", "0.5"]
    steady_log = tmp_path / "steady.log"
    steady = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(steady_log, "w"))
    produced = produce_chunks(broker.bootstrap, parts[0])[1]
    rng = random.Random(20261201)
    kills, readers = 0, []
    try:
        for i in range(2):
            log = tmp_path / f"killed{i}.log"
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
            _wait_for_partitions(proc, log)
            produced += produce_chunks(broker.bootstrap, parts[i + 1])[1]
            assert wait_for_line(proc, log, "stored batch", 1, deadline_s=120), log.read_text()[-3000:]
            if i == 0:
                readers = _read_while_writing(target, tmp_path, monkeypatch)
            taken = _assignments(steady_log).count([0, 1, 2, 3])
            kills += sigkill_within(proc, rng.uniform(0.0, 0.6))
            # the steady worker takes the killed one's partitions over before it is restarted
            _wait_for_partitions(steady, steady_log, want=[0, 1, 2, 3], times=taken + 1)
        # the last restart runs to the end beside the steady worker (in the group before it
        # is stopped: a SIGTERM during start-up would meet Python's default handler)
        final_log = tmp_path / "final.log"
        final = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(final_log, "w"))
        _wait_for_partitions(final, final_log)
        _wait_until_stored(target, produced, steady, deadline_s=120, logs=(steady_log, final_log))
        for p in (final, steady):
            p.send_signal(signal.SIGTERM)
        assert final.wait(timeout=60) == 0 and steady.wait(timeout=60) == 0, steady_log.read_text()[-3000:]
    finally:
        for p in (steady,):
            if p.poll() is None:
                p.kill()
    assert kills == 2
    assert produced == sum(g.num_rows + s.num_rows for _, g, s in chunks)
    assert _assignments(steady_log).count([0, 1, 2, 3]) >= 2, _assignments(steady_log)
    outputs = []
    for reader in readers:
        out, err = reader.communicate(timeout=120)
        assert reader.returncode == 0, err
        outputs.append(out)
    assert list((tmp_path / "out").rglob("*.csv")), "the export wrote no files"
    assert "slicemeter recommend" in outputs[1]
    con = store.connect(target, read_only=True)
    try:
        assert _checksum(con) == want
        keys = ["hour", "gpu_uuid", "pod_uid", "container"]
        got = _frame(con, "SELECT * FROM slice_hour", keys)
        ref = _frame(con, store.sql_text("testkit/slice_hour_from_raw.sql"), keys)
        assert len(got) == len(ref) > 0 and got["sample_count"].sum() == sum(s.num_rows for _, _, s in chunks)
        pd.testing.assert_frame_equal(got[ref.columns], ref, check_dtype=False, rtol=1e-9)
        assert share_oracle.disagreements(con).empty and got["usage_unverified_s"].sum() > 0
        keys = ["hour", "gpu_uuid"]
        got = _frame(con, "SELECT * FROM gpu_hour", keys)
        ref = _frame(con, store.sql_text("testkit/gpu_hour_from_raw.sql"), keys)
        pd.testing.assert_frame_equal(got[ref.columns], ref, check_dtype=False, rtol=1e-9)
        # the dashboard, the workers gone: the lake's last snapshot, to the GPU-hour
        util, capacity = con.execute("SELECT sum(sm_util_s) / sum(metered_s), sum(metered_s) / 3600 "
                                     "FROM gpu_hour").fetchone()
    finally:
        con.close()
    at = run_app(target, monkeypatch, timeout=120)
    assert metric(at, "Capacity") == f"{capacity:,.0f}" and metric(at, "Fleet utilization") == fmt.pct(util)
    # the Tenants page's bill, on the dashboard's kept connection, is the bill of a fresh one
    at = run_app(target, monkeypatch, page="tenants", timeout=120)
    con = store.connect(target, read_only=True)
    try:
        bill = chargeback(con, pd.Timestamp(START, unit="ms").strftime("%Y-%m"), basis="allocation", idle="platform")
    finally:
        con.close()
    total = sum(bill["cost"], Decimal(0))
    assert total > 0 and metric(at, "Total") == fmt.money(total, money.currency(bill))


def _wait_until_stored(target: str, produced: int, worker: subprocess.Popen, deadline_s: float,
                       logs: tuple[Path, ...] = ()) -> None:
    """Poll the lake (a reader's snapshot) until it holds `produced` samples, while `worker` runs;
    past the deadline, the tails of the workers' `logs` say where each stopped."""
    deadline = time.monotonic() + deadline_s
    con = store.connect(target, read_only=True)
    try:
        while True:
            stored = con.execute("SELECT (SELECT count(*) FROM raw_gpu_rows) + (SELECT count(*) FROM raw_slice_rows)"
                                 ).fetchone()[0]
            if stored >= produced:
                return
            assert time.monotonic() < deadline, f"{stored} of {produced} samples stored\n" + "\n".join(
                f"--- {log.name}:\n" + "\n".join(log.read_text().splitlines()[-25:]) for log in logs)
            with pytest.raises(subprocess.TimeoutExpired):
                worker.wait(timeout=0.2)
            lake.refresh(con)
    finally:
        con.close()


def _read_while_writing(target: str, tmp_path: Path, monkeypatch) -> list[subprocess.Popen]:
    """A dashboard query and the dashboard app in this process, an export and a right-sizing
    plan in children, against the lake while both workers write: they see a committed snapshot (whole batches
    only)."""
    con = store.connect(target, read_only=True)
    try:
        day = pd.Timestamp(START, unit="ms").floor("D")
        summary = con.execute(store.sql_text("dashboard/fleet_summary.sql"),
                              {"start": day.to_pydatetime(), "end": (day + pd.Timedelta(days=1)).to_pydatetime()}).df()
        assert len(summary) > 0
        hours = con.execute("SELECT sum(sample_count) FROM slice_hour").fetchone()[0]
        rows = con.execute("SELECT count(*) FROM raw_slice_rows").fetchone()[0]
        # rows and rollup deltas commit together, and a reader holds one snapshot: its
        # rollups count its rows exactly
        assert hours == rows > 0
    finally:
        con.close()
    assert float(metric(run_app(target, monkeypatch, timeout=120), "Capacity").replace(",", "")) > 0
    month = pd.Timestamp(START, unit="ms").strftime("%Y-%m")
    return [subprocess.Popen([*SLICEMETER, *args, "--db", target, "--month", month], cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for args in (["export", "--out", str(tmp_path / "out")], ["recommend"])]


# ---- a replay on another partition ---------------------------------------------------

HOUR, STEP = 3_600_000, 60_000
T0 = recent_midnight_ms(days_ago=2) + 9 * HOUR
NODE = SynthNode("node-a", "https://acme.example:6443", gpus=2, slices_per_gpu=2)


def _produce_to(bootstrap: str, values: list[bytes], key: bytes, partition: int) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for value in values:
        p.send(TOPIC, key=key, value=value, partition=partition)
    p.flush()
    p.close()


def _ingest_until_idle(bootstrap: str, target: str) -> None:
    done = subprocess.run([*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", target, "--group", "",
                           "--until-idle", "4"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def _billed_and_letters(target: str) -> tuple[list, list]:
    con = store.connect(target, read_only=True)
    try:
        hours = con.execute("SELECT hour, sum(sample_count), round(sum(alloc_dominant_share_s), 6) "
                            "FROM slice_hour GROUP BY 1 ORDER BY 1").fetchall()
        letters = con.execute('SELECT "partition", error FROM dead_letters ORDER BY "offset"').fetchall()
    finally:
        con.close()
    return hours, letters


def test_a_replay_on_another_partition_of_a_lake_is_billed_once(broker, lake_db):
    target, _ = lake_db
    create_topic(broker.bootstrap, partitions=2)
    ticks = [encode_tables(*node_tables(NODE, [ts], STEP)) for ts in np.arange(T0, T0 + int(3.5 * HOUR), STEP)]
    _produce_to(broker.bootstrap, ticks, NODE.node.encode(), partition=0)
    _ingest_until_idle(broker.bootstrap, target)
    before, letters = _billed_and_letters(target)
    assert before and not letters

    _produce_to(broker.bootstrap, ticks[:60], b"another-key", partition=1)   # the first hour again
    _ingest_until_idle(broker.bootstrap, target)
    after, letters = _billed_and_letters(target)
    assert after == before
    assert len(letters) == 60 and all(p == 1 and e.startswith("duplicate") for p, e in letters)
