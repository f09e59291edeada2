"""Slice rows reach raw_slice_rows in whole DuckDB row groups only: batches close where
their slice rows fill whole row groups (slicemeter.ingest.writer.batch_full), and what is left over
waits in raw_slice_tail (sql/schema/003_raw_slice_tail.sql)."""
from __future__ import annotations

import numpy as np

from slicemeter import store
from slicemeter.ingest.strings import StringIds
from slicemeter.ingest.consumer import IngestConfig
from slicemeter.ingest.writer import ROW_GROUP_ROWS, Batch, batch_full, configure_writes, held_slice_rows, write_batch
from slicemeter.testkit.synth_ticks import SynthNode, node_tables


def test_slice_rows_fill_whole_row_groups():
    # 4 slices per GPU: 80 % of the samples are slice rows; 250k samples -> 2 row groups
    assert not batch_full(250_000, 200_000, 250_000)          # 250k samples, short of 2 groups
    assert not batch_full(307_199, 245_759, 250_000)
    assert batch_full(307_200, 2 * ROW_GROUP_ROWS, 250_000)
    # 500k samples -> 3.26 row groups of slice rows -> 3
    assert not batch_full(450_000, 360_000, 500_000)
    assert batch_full(460_800, 3 * ROW_GROUP_ROWS, 500_000)


def test_rows_held_back_count_towards_the_row_groups():
    assert not batch_full(300_000, 2 * ROW_GROUP_ROWS - 801, 250_000, held=800)
    assert batch_full(300_000, 2 * ROW_GROUP_ROWS - 800, 250_000, held=800)


def test_one_slice_per_gpu_and_no_slices():
    # whole GPUs: half the samples are slice rows; 250k -> 1.02 row groups -> 1
    assert not batch_full(245_758, ROW_GROUP_ROWS - 1, 250_000)
    assert batch_full(245_760, ROW_GROUP_ROWS, 250_000)
    # too few slice rows for a single row group: plain sample count
    assert not batch_full(249_999, 1_000, 250_000)
    assert batch_full(250_000, 1_000, 250_000)
    assert not batch_full(0, 0, 250_000)


def _row_group_sizes(con) -> list[int]:
    return [n for (n,) in con.execute(
        "SELECT max(count) FROM pragma_storage_info('raw_slice_rows') GROUP BY row_group_id ORDER BY row_group_id"
    ).fetchall()]


def test_raw_slice_rows_take_whole_row_groups_and_hold_back_the_rest(tmp_path):
    node = SynthNode("gpu-node-0", "https://acme:6443")   # 16 slices: 16 slice rows per Tick
    ticks = 15_625                                        # 250,000 slice rows per batch
    con = store.connect(tmp_path / "rg.duckdb")
    configure_writes(con, IngestConfig.duckdb_memory)   # as the ingest writes: in parallel, in no set order
    ids = StringIds(con)
    memory_used = 0
    for i in range(3):
        gpus, slices = node_tables(node, 1_800_000_000_000 + (i * ticks + np.arange(ticks)) * 10_000, seed=i)
        memory_used += sum(v for v in slices.column("hami_memory_used_bytes").to_pylist() if v is not None)
        write_batch(con, Batch(gpus=[gpus], slices=[slices], samples=gpus.num_rows + slices.num_rows,
                               slice_rows=slices.num_rows, next_offsets={("t", 0): i + 1}), ids)
        stored = (i + 1) * 250_000 // ROW_GROUP_ROWS * ROW_GROUP_ROWS
        assert con.execute("SELECT count(*) FROM raw_slice_rows").fetchall() == [(stored,)]
        assert held_slice_rows(con) == (i + 1) * 250_000 - stored
        assert set(_row_group_sizes(con)) <= {ROW_GROUP_ROWS}
    con.execute("CHECKPOINT")
    assert _row_group_sizes(con) == [ROW_GROUP_ROWS] * 6
    # every row exactly once, across both tables (the check's DISTINCT needs more memory
    # than ingest's limit: DuckDB 1.5's struct hashing)
    con.execute("SET memory_limit = '1GB'")
    assert con.execute("SELECT count(*), count(DISTINCT (ts_ms, pod_uid, container)), sum(hami_memory_used_bytes) "
                       "FROM raw_slice").fetchall() == [(750_000, 750_000, memory_used)]
