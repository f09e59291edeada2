"""The reader file ingest keeps for the dashboard, exports and right-sizing
(store/reader_file.py): the tables readers read, no raw samples, a consistent state pinned
between two ingest transactions, refreshed beside ingest."""
from __future__ import annotations

import os
from datetime import datetime

import numpy as np
import pytest

from slicemeter import store
from slicemeter.chargeback.bill import compute_bill
from slicemeter.chargeback.close import close_month
from slicemeter.chargeback.exports import write_exports
from slicemeter.chargeback.prices import DEFAULT_PRICES, load_prices
from slicemeter.store.reader_file import ReaderFile
from slicemeter.ingest.strings import StringIds
from slicemeter.ingest.writer import Batch, write_batch
from slicemeter.testkit.ingest_helpers import rollup_samples
from slicemeter.testkit.recommend_rows import add_tenant
from slicemeter.testkit.synth_ticks import SynthNode, node_tables

JAN = 1_798_761_600_000      # 2027-01-01 00:00 UTC
FEB = 1_801_440_000_000      # 2027-02-01 00:00 UTC
INTERVAL = 30_000
NODES = [SynthNode("gpu-node-0", "https://acme:6443"),
         SynthNode("gpu-node-1", "https://beta:6443", model_index=1, slices_per_gpu=2)]
# what readers read besides the tables: the attribution and dashboard views
READER_VIEWS = ["gpu_hour_tenant", "slice_hour_tenant", "dash_gpu_hour", "gpu_inventory_named", "gpu_hour_gaps"]


def _store(con, start_ms: int, hours: int, offset: int) -> None:
    """`hours` of both nodes from `start_ms`, one batch per hour, rollups folded."""
    ids = StringIds(con)
    for h in range(hours):
        b = Batch(next_offsets={("t", 0): offset + h + 1})
        for k, node in enumerate(NODES):
            ts = start_ms + h * 3_600_000 + np.arange(0, 3_600_000, INTERVAL)
            gpus, slices = node_tables(node, ts, INTERVAL, seed=offset + 100 * h + k)
            b.gpus.append(gpus)
            b.slices.append(slices)
            b.samples += gpus.num_rows + slices.num_rows
        write_batch(con, b, ids, fold=True)


@pytest.fixture()
def live(tmp_path):
    """A store with a closed January (frozen copy), late January data, and February."""
    con = store.connect(tmp_path / "live.duckdb")
    add_tenant(con, "acme", "https://acme:6443")
    add_tenant(con, "beta", "https://beta:6443")
    _store(con, FEB - 6 * 3_600_000, 4, offset=0)
    close_month(con, "2027-01", load_prices(DEFAULT_PRICES), now=datetime(2027, 2, 1, 1))
    _store(con, FEB - 2 * 3_600_000, 4, offset=10)  # late January hours, then February
    yield con
    con.close()


def _rows(con, relation: str) -> list:
    return sorted(con.execute(f"SELECT * FROM {relation}").fetchall(), key=repr)


def _exports(con, out) -> dict[str, bytes]:
    bill = compute_bill(con, "2027-02", prices=load_prices(DEFAULT_PRICES))
    return {p.name: p.read_bytes() for p in write_exports(con, bill, out)}


def test_readers_see_what_the_live_store_shows_without_raw_samples(live, tmp_path):
    dest = ReaderFile(live, tmp_path / "reader.duckdb").refresh()
    reader = store.connect(dest, read_only=True)
    copied = [name for name, with_rows, *_ in store.reader_tables(live)
              if with_rows]
    assert {"gpu_hour", "slice_hour", "tenants", "closed_months", "frozen_gpu_hour", "frozen_slice_hour"} <= set(copied)
    # every row once, as in the store: the whole copy wrote its latest hour's rows a second time (settling)
    for relation in copied + READER_VIEWS:
        assert _rows(reader, relation) == _rows(live, relation), relation
    assert reader.execute("SELECT count(*) FROM frozen_slice_hour").fetchone()[0] > 0
    # the rollups count every stored sample; the samples themselves stay in the live file
    assert rollup_samples(reader) == live.execute(store.sql_text("testkit/sample_checksum.sql")).fetchone()[0] > 0
    assert reader.execute(store.sql_text("testkit/sample_checksum.sql")).fetchone() == (0, 0)
    # the export of the open month (with January's corrections) is byte for byte the same
    assert _exports(reader, tmp_path / "from-reader") == _exports(live, tmp_path / "from-live")


def test_reader_file_size_does_not_follow_the_raw_samples(live, tmp_path):
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    before = reader.refresh().stat().st_size
    raw_before = live.execute("SELECT count(*) FROM raw_slice_stored").fetchone()[0]
    # ten times the raw rows, the rollups unchanged (as a longer retention would hold)
    for _ in range(10):
        live.execute("INSERT INTO raw_slice_rows BY NAME SELECT * REPLACE (ts_ms - 86400000 AS ts_ms) "
                     "FROM raw_slice_stored LIMIT 20000")
    live.execute("CHECKPOINT")
    assert reader.refresh().stat().st_size <= before + (256 << 10)  # one DuckDB block of slack
    # while the raw rows grew by 200,000
    assert live.execute("SELECT count(*) FROM raw_slice_stored").fetchone()[0] - raw_before == 200_000


def test_a_refresh_shows_the_state_it_was_started_on(live, tmp_path):
    """Ingest commits while the copy runs; the copy is of the state at start()."""
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    tenants_before = _rows(live, "tenants")
    assert reader.start()
    add_tenant(live, "gamma", "https://gamma:6443")     # a commit of ingest's, not waiting for the copy
    _store(live, FEB, 1, offset=50)
    reader.wait()
    with store.connect(reader.dest, read_only=True) as con:
        assert _rows(con, "tenants") == tenants_before
        assert rollup_samples(con) < rollup_samples(live)
    reader.refresh()
    with store.connect(reader.dest, read_only=True) as con:
        assert "gamma" in {r[0] for r in con.execute("SELECT tenant FROM tenants").fetchall()}
        assert rollup_samples(con) == rollup_samples(live)


def test_a_failed_refresh_keeps_the_previous_file_and_the_next_one_works(live, tmp_path):
    dest = tmp_path / "reader.duckdb"
    ReaderFile(live, dest).refresh()
    good = dest.read_bytes()
    blocked = ReaderFile(live, tmp_path / "blocked")
    (tmp_path / "blocked").mkdir()               # the rename over a directory fails
    with pytest.raises(RuntimeError, match="blocked: refresh failed"):
        blocked.refresh()
    assert dest.read_bytes() == good
    assert not (tmp_path / ".blocked.tmp").exists()
    assert "slicemeter_reader_next" not in {r[0] for r in live.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    _store(live, FEB, 1, offset=60)
    ReaderFile(live, dest).refresh()
    with store.connect(dest, read_only=True) as con:
        assert rollup_samples(con) == rollup_samples(live)


def test_a_refresh_with_rollup_deltas_pending_is_refused(live, tmp_path):
    """Pending deltas would be missing from the reader's rollups (a short bill): fold first."""
    live.execute("INSERT INTO gpu_inventory_pending SELECT * FROM gpu_inventory LIMIT 1")
    reader = ReaderFile(live, tmp_path / "reader.duckdb")
    with pytest.raises(RuntimeError, match="rollup deltas pending"):
        reader.start()
    assert not reader.dest.exists()
    store.fold_pending_rollups(live)
    assert reader.refresh().is_file()
