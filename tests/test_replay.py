"""A captured signed Tick is billed once however late, under whatever Kafka key and on
whatever partition it comes back: through the real broker and the `slicemeter ingest`
CLI (docs/security.md, What a Tick may claim)."""
from __future__ import annotations

import datetime as dt
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from slicemeter import signing
from slicemeter.store import connect
from slicemeter.testkit.ingest_helpers import SLICEMETER, create_topic, produce_raw
from slicemeter.testkit.synth_ticks import SynthNode, node_tables, recent_midnight_ms
from slicemeter.tick import encode_tables

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.broker
HOUR, STEP = 3_600_000, 60_000
T0 = recent_midnight_ms(days_ago=2) + 9 * HOUR
ACME = "https://acme.example:6443"
KEY_ID, KEY = "acme-1", b"acme-secret-0123456789"
NODE = SynthNode("node-a", ACME, gpus=2, slices_per_gpu=2)

Message = tuple[bytes, bytes, list]   # (Kafka key, value, headers)


def signed(gpus: pa.Table, slices: pa.Table, key: bytes = NODE.node.encode()) -> Message:
    value = encode_tables(gpus, slices)
    return key, value, signing.signed_headers(KEY_ID, KEY, value)


def ticks(start_ms: int, hours: float) -> list[Message]:
    """One signed message per Tick, a Tick a minute, every Tick reading the same (so
    every full hour bills alike)."""
    return [signed(*node_tables(NODE, [ts], STEP)) for ts in range(start_ms, start_ms + int(hours * HOUR), STEP)]




def publishers(tmp_path: Path) -> Path:
    (tmp_path / "acme.key").write_bytes(KEY)
    config = tmp_path / "publishers.yaml"
    config.write_text(f"publishers:\n  - {{key_id: {KEY_ID}, key_file: acme.key, clusters: ['{ACME}']}}\n")
    return config


def ingest(bootstrap: str, db: Path, tmp_path: Path, now_ms: int) -> None:
    now = dt.datetime.fromtimestamp(now_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    done = subprocess.run(
        [*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", str(db), "--group", "", "--until-idle", "4",
         "--publishers", str(publishers(tmp_path))],
        cwd=REPO, capture_output=True, text=True, timeout=180, env=os.environ | {"SLICEMETER_NOW": now})
    assert done.returncode == 0, done.stderr[-3000:]


def billed(db: Path) -> dict[int, tuple]:
    """Per hour (ms): the slices' metered seconds, dominant-share seconds and samples, and
    the GPUs' samples: what the month's bill is made of."""
    con = connect(db, read_only=True)
    try:
        slices = con.execute("SELECT epoch_ms(hour), sum(metered_s), round(sum(alloc_dominant_share_s), 6), "
                             "sum(sample_count) FROM slice_hour GROUP BY 1").fetchall()
        gpus = dict(con.execute("SELECT epoch_ms(hour), sum(sample_count) FROM gpu_hour GROUP BY 1").fetchall())
    finally:
        con.close()
    return {hour: (*rest, gpus.get(hour)) for hour, *rest in slices}


def dead_letters(db: Path) -> list[tuple[int, int, str]]:
    con = connect(db, read_only=True)
    try:
        return con.execute('SELECT "partition", "offset", error FROM dead_letters ORDER BY 1, 2').fetchall()
    finally:
        con.close()


def test_an_hour_replayed_under_another_key_two_and_a_half_hours_later_is_billed_once(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    captured = ticks(T0, 1)
    replayed = [(b"another-key", value, headers) for _, value, headers in captured]
    produce_raw(broker.bootstrap, captured + ticks(T0 + HOUR, 2.5) + replayed)
    db = tmp_path / "r.duckdb"
    ingest(broker.bootstrap, db, tmp_path, now_ms=T0 + int(3.5 * HOUR) + STEP)

    bill = billed(db)
    full_hour = (3600 * 4, pytest.approx(bill[T0 + HOUR][1]), 60 * 4, 60 * 2)
    assert bill[T0] == full_hour and bill[T0 + HOUR] == full_hour   # the replayed hour bills as its twin
    letters = dead_letters(db)
    assert len(letters) == len(replayed) and all(e.startswith("duplicate") for _, _, e in letters)
    assert [o for _, o, _ in letters] == list(range(210, 270))


def test_a_replay_after_an_ingest_restart_is_billed_once(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=1)
    captured = ticks(T0, 1)
    produce_raw(broker.bootstrap, captured + ticks(T0 + HOUR, 2.5))
    db = tmp_path / "r.duckdb"
    ingest(broker.bootstrap, db, tmp_path, now_ms=T0 + int(3.5 * HOUR) + STEP)
    before = billed(db)
    assert before[T0][0] == 3600 * 4 and not dead_letters(db)

    produce_raw(broker.bootstrap, [(b"replayer", value, headers) for _, value, headers in captured])
    ingest(broker.bootstrap, db, tmp_path, now_ms=T0 + 4 * HOUR)
    assert billed(db) == before
    letters = dead_letters(db)
    assert len(letters) == len(captured) and all(e.startswith("duplicate") for _, _, e in letters)


def test_a_replay_on_another_partition_is_refused_whole_even_slices_alone_or_mixed_with_new_instants(broker, tmp_path):
    create_topic(broker.bootstrap, partitions=2)
    captured = ticks(T0, 1)
    produce_raw(broker.bootstrap, captured + ticks(T0 + HOUR, 2.5), partition=0)
    db = tmp_path / "r.duckdb"
    ingest(broker.bootstrap, db, tmp_path, now_ms=T0 + int(3.5 * HOUR) + STEP)
    before = billed(db)

    gpus, slices = node_tables(NODE, [T0 + 10 * STEP], STEP)
    overlapping = node_tables(NODE, np.arange(T0 + int(3.5 * HOUR) - 5 * STEP, T0 + int(3.5 * HOUR) + 5 * STEP, STEP), STEP)
    replays = [captured[0],                                 # as captured, another partition
               signed(gpus.slice(0, 0), slices),            # an instant's slice rows alone
               signed(*overlapping, key=b"batch")]          # 5 instants stored, 5 new ones
    produce_raw(broker.bootstrap, replays, partition=1)
    ingest(broker.bootstrap, db, tmp_path, now_ms=T0 + 4 * HOUR)

    assert billed(db) == before   # the 5 new instants of the overlapping message are refused with it
    letters = dead_letters(db)
    assert [(p, o) for p, o, _ in letters] == [(1, 0), (1, 1), (1, 2)]
    assert all(e.startswith("duplicate") for _, _, e in letters), letters
