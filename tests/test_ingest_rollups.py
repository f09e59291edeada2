"""Rollups updated batch by batch (late, out-of-order Ticks) equal a from-scratch aggregation."""
from __future__ import annotations

import random

import duckdb
import numpy as np
import pandas as pd
import pytest

from slicemeter import store
from slicemeter.ingest.strings import StringIds
from slicemeter.ingest.writer import Batch, apply_retention, write_batch
from slicemeter.testkit import share_oracle
from slicemeter.testkit.synth_ticks import SynthNode, node_tables

DAY_START = 1_800_057_600_000  # a UTC midnight
INTERVAL = 30_000


def _chunks():
    """One simulated day of 3 nodes in 15-minute chunks; gpu-node-2 is down 05:00-07:00."""
    nodes = [SynthNode("gpu-node-0", "https://acme:6443"), SynthNode("gpu-node-1", "https://beta:6443", model_index=1),
             SynthNode("gpu-node-2", "https://acme:6443", slices_per_gpu=1, gpus=2)]
    out = []
    for k, node in enumerate(nodes):
        for q in range(96):
            ts = DAY_START + q * 900_000 + np.arange(0, 900_000, INTERVAL)
            if node.node == "gpu-node-2" and 20 <= q < 28:
                continue
            out.append(node_tables(node, ts, INTERVAL, seed=k * 1000 + q))
    return out


def _ingest(con, chunks, batch_size, fold_every=1):
    """Store `chunks` in batches, folding the rollup deltas every `fold_every` batches."""
    ids = StringIds(con)
    for n, i in enumerate(range(0, len(chunks), batch_size), start=1):
        b = Batch(next_offsets={("t", 0): i})
        for gpus, slices in chunks[i:i + batch_size]:
            b.gpus.append(gpus)
            b.slices.append(slices)
            b.samples += gpus.num_rows + slices.num_rows
        write_batch(con, b, ids, fold=n % fold_every == 0)


def _pending_rows(con) -> int:
    return con.execute("SELECT (SELECT count(*) FROM gpu_hour_pending) + (SELECT count(*) FROM slice_hour_pending) "
                       "+ (SELECT count(*) FROM gpu_inventory_pending)").fetchall()[0][0]


def _frame(con, sql, keys):
    return con.execute(sql).df().sort_values(keys).reset_index(drop=True)


# fold_every 1: every batch folds its own deltas. 6: deltas of up to 6 batches wait in the
# *_pending tables, the last ones until the store is opened again (a stopped ingest).
@pytest.fixture(scope="module", params=[1, 6], ids=["fold-each-batch", "fold-every-6"])
def day_db(request, tmp_path_factory):
    chunks = _chunks()
    rng = random.Random(7)
    in_order = chunks[:]
    # late Ticks: a third of the chunks arrive shuffled after everything else
    late = rng.sample(range(len(chunks)), len(chunks) // 3)
    on_time = [c for i, c in enumerate(in_order) if i not in set(late)]
    arrival = on_time + [in_order[i] for i in late]
    path = tmp_path_factory.mktemp("roll") / "day.duckdb"
    con = store.connect(path)
    _ingest(con, arrival, batch_size=7, fold_every=request.param)
    if request.param > 1:
        assert _pending_rows(con) > 0      # 40 batches: the last four still wait (a crashed ingest)
        con.close()
        # a reader (an export) opening the file folds them too: it must not bill short
        con = store.connect(path, read_only=True)
    assert _pending_rows(con) == 0
    yield con, chunks
    con.close()


def test_slice_hour_equals_from_scratch(day_db):
    con, chunks = day_db
    keys = ["hour", "gpu_uuid", "pod_uid", "container"]
    got = _frame(con, "SELECT * FROM slice_hour", keys)
    want = _frame(con, store.sql_text("testkit/slice_hour_from_raw.sql"), keys)
    assert len(got) == len(want) > 0
    assert got["sample_count"].sum() == sum(s.num_rows for _, s in chunks)
    pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False, rtol=1e-9)
    assert got["usage_share_s"].sum() > 0 and got["hami_nvml_disagree_s"].sum() > 0
    assert share_oracle.disagreements(con).empty


# Each a plausible slip in the share SQL; the rollup stored with it must not pass the oracle.
WRONG_MACROS = {
    "whole GPU not counted whole": "capped_share(whole, x) AS coalesce(least(1.0::DOUBLE, greatest(0.0::DOUBLE, x::DOUBLE)), 0.0::DOUBLE)",
    "HAMi memory trusted always": "trusted_memory(hami, nvml) AS coalesce(hami, nvml)",
    "tolerance 50 % not 5 %": "memory_disagrees(hami, nvml) AS "
                              "coalesce(abs(hami - nvml)::DOUBLE > greatest(134217728.0::DOUBLE, 0.5::DOUBLE * nvml), false)",
}


@pytest.mark.parametrize("macro", [None, *WRONG_MACROS.values()], ids=["as-shipped", *WRONG_MACROS])
def test_the_share_oracle_catches_a_wrong_formula(tmp_path, macro):
    con = store.connect(tmp_path / "s.duckdb")
    if macro:
        con.execute("CREATE OR REPLACE TEMP MACRO " + macro)   # what the batch rollup SQL calls
    _ingest(con, _chunks()[::12], batch_size=4)
    assert share_oracle.disagreements(con).empty == (macro is None)


def test_gpu_hour_equals_from_scratch_and_energy_from_counter(day_db):
    con, chunks = day_db
    keys = ["hour", "gpu_uuid"]
    got = _frame(con, "SELECT * FROM gpu_hour", keys)
    want = _frame(con, store.sql_text("testkit/gpu_hour_from_raw.sql"), keys)
    assert len(got) == len(want) > 0
    pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False, rtol=1e-9)
    # synth counters rise 150 W x time: a full hour is 3600 s x 150 W (delta + first interval)
    full = got[got["metered_s"] == 3600]
    assert np.allclose(full["energy_joules"], 3600 * 150.0)


def test_minute_rollup_and_unmetered_gaps(day_db):
    con, _ = day_db
    minutes = con.execute("SELECT count(*), sum(sample_count), max(metered_s) FROM slice_minute").fetchone()
    raw = con.execute("SELECT count(*), count(DISTINCT (ts_ms // 60000, gpu_uuid, pod_uid, container)) FROM raw_slice").fetchone()
    assert minutes[1] == raw[0] and minutes[0] == raw[1] and minutes[2] == 60
    # batch-by-batch partials merge to the same minute sums as the raw rows
    by_min = con.execute("""SELECT sum(metered_s) FROM gpu_minute""").fetchone()[0]
    assert by_min == con.execute("SELECT sum(interval_ms) / 1000.0 FROM raw_gpu").fetchone()[0]
    gaps = con.execute("SELECT node, count(*), min(metered_s), max(metered_s) FROM gpu_hour_gaps GROUP BY node").fetchall()
    assert gaps == [("gpu-node-2", 4, 0.0, 0.0)]  # 2 GPUs x 2 hours fully unmetered


def test_shares_follow_the_contract(day_db):
    con, _ = day_db
    whole = con.execute("SELECT min(alloc_dominant_share_s / metered_s), max(alloc_dominant_share_s / metered_s) "
                        "FROM slice_hour WHERE whole_gpu").fetchone()
    assert whole == (1.0, 1.0)
    assert con.execute("SELECT max(usage_share_s / metered_s) <= 1 AND min(used_mem_share_s) >= 0 FROM slice_hour").fetchone()[0]
    # synth: every 7th sample HAMi under-reports by 4 GiB -> NVML wins and disagreement is counted
    assert con.execute("SELECT sum(hami_nvml_disagree_s) > 0 FROM slice_hour").fetchone()[0]


def test_raw_retention_keeps_rollups(tmp_path):
    con = store.connect(tmp_path / "r.duckdb")
    _ingest(con, _chunks()[:8], batch_size=4)
    before = con.execute("SELECT sum(sample_count) FROM slice_hour").fetchone()[0]
    minutes_sql = ("SELECT (SELECT count(*) FROM slice_minute), (SELECT sum(sample_count) FROM slice_minute), "
                   "(SELECT sum(usage_share_s) FROM slice_minute), (SELECT sum(energy_joules) FROM gpu_minute)")
    minutes = con.execute(minutes_sql).fetchone()
    apply_retention(con, days=1, now_ms=DAY_START + 86_400_000 + 3_600_000 + 30_000)  # cut at 01:00:30
    assert con.execute("SELECT min(ts_ms) FROM raw_slice").fetchone()[0] >= DAY_START + 3_600_000
    assert con.execute("SELECT sum(sample_count) FROM slice_hour").fetchone()[0] == before
    # minutes of the deleted rows were materialised in the same transaction (one minute split)
    assert con.execute("SELECT count(*) FROM slice_minute_part").fetchone()[0] > 0
    after = con.execute(minutes_sql).fetchone()
    assert after[:2] == minutes[:2] and np.allclose(after[2:], minutes[2:], rtol=1e-12)


def test_a_reader_that_cannot_fold_pending_deltas_says_so(tmp_path):
    """Rollup deltas a crashed ingest left pending: a reader that cannot fold them (another
    reader holds the file) stops with an error instead of showing short rollups."""
    path = tmp_path / "p.duckdb"
    con = store.connect(path)
    _ingest(con, _chunks()[:8], batch_size=4, fold_every=100)
    assert _pending_rows(con) > 0
    con.close()
    other = duckdb.connect(str(path), read_only=True)   # plain DuckDB: no fold
    try:
        with pytest.raises(RuntimeError, match="rollup deltas an ingest left pending.*restarting `slicemeter ingest`"):
            store.connect(path, read_only=True)
    finally:
        other.close()
    with store.connect(path, read_only=True) as reader:  # alone, the reader folds them first
        assert _pending_rows(reader) == 0
        assert reader.execute("SELECT sum(sample_count) FROM slice_hour").fetchone()[0] == \
            reader.execute("SELECT count(*) FROM raw_slice").fetchone()[0] > 0
