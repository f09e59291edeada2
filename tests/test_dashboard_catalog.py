"""The Tenants page's catalog panel: when each catalog source last synced (and a failed
refresh), and the clusters no tenant matches with their sample counts, against SQL
computed here without slicemeter's views."""
from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from streamlit.testing.v1 import AppTest

from slicemeter.testkit.fleet_fixture import build_fleet_db
from slicemeter import store
from slicemeter.ingest import tenants

APP = str(Path(__file__).resolve().parent.parent / "dashboard" / "app.py")
STRAY = "https://[2001:db8:99::1]:6443"


@pytest.fixture(scope="module")
def catalog_db(tmp_path_factory) -> Path:
    path = build_fleet_db(tmp_path_factory.mktemp("cat") / "fleet.duckdb", "2026-11", days=2)
    con = store.connect(path)
    try:
        # a node of a cluster the catalog does not know, two hours; and one outside the month
        for hour, samples in (("2026-11-01 05:00:00", 360), ("2026-11-01 06:00:00", 300), ("2026-10-30 06:00:00", 7)):
            con.execute("""INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s, sample_count)
                           VALUES (CAST(? AS TIMESTAMP), ?, 'stray-node', 'GPU-stray', 'NVIDIA L4', 24000000000, 3600, ?)""",
                        [hour, STRAY, samples])
        tenants.record_sync(con, "kamaji-api", True, tenants.Catalog(tenants=[tenants.Tenant("acme", aliases=("a", "b"))]))
        tenants.record_sync(con, "kamaji-metrics", True, tenants.Catalog(tenants=[tenants.Tenant("acme")]))
        tenants.record_sync(con, "kamaji-metrics", False, message="--kamaji-metrics: cannot fetch http://kamaji:8080/metrics")
        con.execute("CHECKPOINT")
    finally:
        con.close()
    return path


def test_tenants_page_shows_the_last_sync_and_the_unassigned_clusters(catalog_db, monkeypatch):
    monkeypatch.setenv("SLICEMETER_DB", str(catalog_db))
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("views/tenants.py").run()
    assert not at.exception, at.exception
    raw = duckdb.connect(str(catalog_db), read_only=True)
    try:
        api_synced = raw.execute("SELECT max(synced_at) FROM catalog_syncs WHERE source = 'kamaji-api'").fetchone()[0]
        samples = raw.execute("""SELECT sum(sample_count) FROM gpu_hour WHERE cluster = ?
                                 AND hour >= TIMESTAMP '2026-11-01' AND hour < TIMESTAMP '2026-12-01'""", [STRAY]).fetchone()[0]
    finally:
        raw.close()
    text = " ".join(m.value for m in at.markdown)
    assert f"**kamaji-api**: last synced {api_synced:%Y-%m-%d %H:%M} UTC, 1 tenants, 2 addresses" in text
    warnings = [w.value for w in at.warning]
    assert any("kamaji-metrics" in w and "failed: --kamaji-metrics: cannot fetch" in w for w in warnings), warnings
    assert any(w.startswith("1 cluster(s) match no tenant in 2026-11") for w in warnings), warnings
    table = next(df.value for df in at.dataframe if "gpu_samples" in df.value.columns)
    assert table[["cluster", "samples", "gpu_samples", "slice_samples", "nodes"]].values.tolist() == \
        [[STRAY, samples, samples, 0, 1]]
    assert samples == 660
