"""The ingest benchmarks' reference: DuckDB inserting the rows an ingest stored, from Arrow,
measured in the same run (bench/bench_ingest.py, bench/bench_ingest_stages.py)."""
from __future__ import annotations

import time
from pathlib import Path

from slicemeter import store
from slicemeter.ingest.consumer import IngestConfig
from slicemeter.ingest.writer import ROW_GROUP_ROWS, configure_writes


def _stored_rows(db: Path) -> tuple:
    """The (GPU rows, slice rows) an ingest stored, as Arrow tables (slice rows: whole row
    groups and held-back rows)."""
    with store.connect(db, read_only=True) as src:
        return (src.sql("SELECT * FROM raw_gpu_rows").to_arrow_table(),
                src.sql("SELECT * FROM raw_slice_stored").to_arrow_table())


def _timed_inserts(scratch: Path, batches: list, ingest_settings: bool) -> tuple[int, float, float]:
    """(rows, seconds, CPU seconds of this process, every thread's) to insert each
    (GPU rows, slice rows) pair of `batches` in a transaction of its own into a fresh file,
    timed to the last COMMIT."""
    con = store.connect(scratch)
    if ingest_settings:
        configure_writes(con, IngestConfig(bootstrap="", db=scratch).duckdb_memory)
    t, cpu = time.perf_counter(), time.process_time()
    for batch_gpu, batch_slice in batches:
        with store.transaction(con):
            con.execute("INSERT INTO raw_gpu_rows SELECT * FROM batch_gpu")
            con.execute("INSERT INTO raw_slice_rows SELECT * FROM batch_slice")
    seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
    con.close()
    return sum(g.num_rows + s.num_rows for g, s in batches), seconds, cpu


def reference_insert(stored: tuple, scratch: Path) -> tuple[int, float, float]:
    """DuckDB inserting the `stored` rows (`_stored_rows`) from Arrow into a fresh file, in
    one transaction with DuckDB's default settings: (rows, seconds, CPU seconds)."""
    return _timed_inserts(scratch, [stored], ingest_settings=False)


def reference_insert_in_batches(stored: tuple, scratch: Path, batch_samples: int) -> tuple[int, float, float]:
    """Context for the ratio, not its reference: DuckDB inserting the `stored` rows
    under the ingest's own constraints, i.e. one transaction per batch of about
    `batch_samples` samples (its slice rows in whole row groups, like the ingest's) and the
    ingest's DuckDB settings (memory limit, checkpoint threshold). (rows, seconds, CPU s)"""
    gpu, sl = (t.combine_chunks() for t in stored)   # contiguous, as the ingest's batches are
    share = sl.num_rows / max(1, gpu.num_rows + sl.num_rows)
    slice_step = max(1, round(batch_samples * share / ROW_GROUP_ROWS)) * ROW_GROUP_ROWS
    n = max(1, -(-sl.num_rows // slice_step))
    gpu_step = -(-gpu.num_rows // n)
    batches = [(gpu.slice(i * gpu_step, gpu_step), sl.slice(i * slice_step, slice_step)) for i in range(n)]
    return _timed_inserts(scratch, batches, ingest_settings=True)


def print_references(db: Path, tmp: Path, rate: float, batch_samples: int, what: str = "ingest") -> None:
    """The reference and the ratio to it, then the in-batches one as context; the stored rows
    are read from `db` once for both."""
    stored = _stored_rows(db)
    rows, seconds, cpu = reference_insert(stored, tmp / "reference.duckdb")
    print(f"reference: DuckDB Arrow insert of the same {rows:,} stored rows: {rows / seconds:,.0f} rows/s, "
          f"{cpu / rows * 1e6:.2f} us CPU per row")
    print(f"ratio {what}/reference: {rate / (rows / seconds):.2f} (goal >= 0.5)")
    rows, seconds, cpu = reference_insert_in_batches(stored, tmp / "reference_batches.duckdb", batch_samples)
    print(f"context: the same rows in the ingest's batch transactions and DuckDB settings: "
          f"{rows / seconds:,.0f} rows/s, {cpu / rows * 1e6:.2f} us CPU per row; {what} at "
          f"{rate / (rows / seconds):.2f} of it")
