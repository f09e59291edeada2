"""The GPUs page's filtered and ordered list, its filters' choices, its health events and
heatmap, and the Problems page's rows read the same from a DuckLake (PostgreSQL catalog,
Parquet data) as from a DuckDB file fed the same ingest batch (the kept-money case's
fleet, testkit/kept_case.py: NVML down for a chunk, a node moving between tenants),
unscoped."""
from __future__ import annotations

import math
from datetime import datetime

import pytest

from slicemeter import store
from slicemeter.dashboard.data import scope_connection
from slicemeter.ingest.strings import HashedStringIds, StringIds
from slicemeter.ingest.writer import InventoryCache, prepare, write_batch, write_lake
from slicemeter.testkit.cb_rows import add_tenants
from slicemeter.testkit.kept_case import chunks_batch, kept_case_chunks

WINDOW = {"start": datetime(2026, 10, 31), "end": datetime(2026, 11, 2)}   # the case's hours
NO_FILTER = {"tenant": None, "node": None, "model": None, "driver": None, "health": None, "search": None,
             "price_model": [], "price_node": [], "price_cluster": [], "price_per_h": [], "throttled_share": 0.25}
CASES = [
    ("gpu_filter_options", {}),
    ("gpu_table", {**NO_FILTER, "sort": "name"}),
    ("gpu_table", {**NO_FILTER, "sort": "waste_cost", "tenant": "acme"}),
    ("gpu_table", {**NO_FILTER, "sort": "problems", "health": "healthy"}),
    ("gpu_table", {**NO_FILTER, "sort": "unmetered", "search": "NODE-1"}),
    ("problems", {"throttled_share": 0.25, "tenant": None, "idle_alloc_min": 0.5, "idle_util_max": 0.05,
                  "memory_limit_share": 0.9}),
    ("gpu_heatmap", {"bucket": "hour", "gpus": None}),   # None: every GPU of the case
]


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * (1 + abs(b))
    return a == b


# the unscoped dashboard only: a tenant-scoped connection on a lake is not covered here
@pytest.mark.parametrize("tenant", [None])
def test_the_filtered_gpu_list_and_problems_read_the_same_from_a_lake(lake_db, tmp_path, tenant):
    target, _ = lake_db
    chunks = kept_case_chunks({"seed": 5, "nvml_down": {2, 17}, "move_at": 4})
    lake, single = store.connect(target), store.connect(tmp_path / "single.duckdb")
    try:
        add_tenants(lake)
        add_tenants(single)
        write_lake(lake, prepare(lake, chunks_batch(chunks, 0, 1), HashedStringIds(lake), InventoryCache(lake)))
        write_batch(single, chunks_batch(chunks, 0, 1), StringIds(single))
    finally:
        lake.close()
        single.close()
    on_file, on_lake = store.connect(tmp_path / "single.duckdb", read_only=True), store.connect(target, read_only=True)
    try:
        if tenant:
            scope_connection(on_file, tenant)
            scope_connection(on_lake, tenant)
        gpus = [r[0] for r in on_file.execute("SELECT DISTINCT gpu_uuid FROM gpu_hour ORDER BY 1").fetchall()]
        assert len(gpus) >= 2
        for name, params in CASES:
            sql = store.sql_text(f"dashboard/{name}.sql")
            params = {**WINDOW, **params, **({"gpus": gpus} if "gpus" in params else {})}
            ours, theirs = on_lake.execute(sql, params).fetchall(), on_file.execute(sql, params).fetchall()
            assert theirs, (name, params)   # each case reads something
            assert len(ours) == len(theirs), (name, params)
            for x, y in zip(ours, theirs):
                assert all(same(a, b) for a, b in zip(x, y)), (name, params, x, y)
    finally:
        on_file.close()
        on_lake.close()
