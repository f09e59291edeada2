"""When a batch is full: about --batch-samples samples, its slice rows rounded to whole
DuckDB row groups (ingest.writer.batch_full)."""
from __future__ import annotations

from ingest.writer import ROW_GROUP_ROWS, batch_full


def test_slice_rows_fill_whole_row_groups():
    # 4 slices per GPU: 80 % of the samples are slice rows; 250k samples -> 2 row groups
    assert not batch_full(250_000, 200_000, 250_000)          # 250k samples, short of 2 groups
    assert not batch_full(307_199, 245_759, 250_000)
    assert batch_full(307_200, 2 * ROW_GROUP_ROWS, 250_000)
    # 500k samples -> 3.26 row groups of slice rows -> 3
    assert not batch_full(450_000, 360_000, 500_000)
    assert batch_full(460_800, 3 * ROW_GROUP_ROWS, 500_000)


def test_one_slice_per_gpu_and_no_slices():
    # whole GPUs: half the samples are slice rows; 250k -> 1.02 row groups -> 1
    assert not batch_full(245_758, ROW_GROUP_ROWS - 1, 250_000)
    assert batch_full(245_760, ROW_GROUP_ROWS, 250_000)
    # too few slice rows for a single row group: plain sample count
    assert not batch_full(249_999, 1_000, 250_000)
    assert batch_full(250_000, 1_000, 250_000)
    assert not batch_full(0, 0, 250_000)
