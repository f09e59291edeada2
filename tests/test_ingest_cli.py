"""Backfill -> broker -> ingest CLI, snapshot, metrics, and config errors."""
from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from slicemeter import store
from slicemeter.simulator.backfill import parse_start, split_by_ticks
from slicemeter.ingest.consumer import IngestConfig, Ingestor
from slicemeter.ingest.metrics import IngestMetrics
from slicemeter.broker import free_port
from slicemeter.common import ConfigError
from slicemeter.testkit.ingest_helpers import SLICEMETER, rollup_samples
from slicemeter.testkit.synth_ticks import SynthNode, node_tables, recent_midnight_ms

REPO = Path(__file__).resolve().parent.parent


def slicemeter(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*SLICEMETER, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_split_by_ticks_keeps_whole_ticks():
    g, s = node_tables(SynthNode("n", "c", gpus=2, slices_per_gpu=3), recent_midnight_ms() + 10_000 * np.arange(100))
    parts = list(split_by_ticks(g, s, max_rows=100))
    assert len(parts) > 1
    assert sum(p[0].num_rows for p in parts) == g.num_rows and sum(p[1].num_rows for p in parts) == s.num_rows
    seen = [set(p[0].column("ts_ms").to_pylist()) for p in parts]
    assert all(not (a & b) for i, a in enumerate(seen) for b in seen[i + 1:])  # a Tick is never split
    assert all(set(p[1].column("ts_ms").to_pylist()) <= seen[i] for i, p in enumerate(parts))


def test_parse_start():
    assert parse_start("2026-11-01") == 1793491200000
    with pytest.raises(ConfigError, match="--start"):
        parse_start("November")


@pytest.mark.broker
def test_backfill_then_ingest_with_catalog(broker, tmp_path, monkeypatch):
    # a fixed "now", a day after the backfill: ingest refuses Ticks older than its raw retention
    monkeypatch.setenv("SLICEMETER_NOW", "2026-11-02T00:00:00Z")
    bf = slicemeter("backfill", "--scenario", "examples/demo.yaml", "--start", "2026-11-01", "--days", "0.125",
                    "--kafka", broker.bootstrap, "--interval", "30")
    assert bf.returncode == 0, bf.stderr
    assert "] 100.0 % backfill " in bf.stderr
    published = int(bf.stderr.split("published ")[1].split(" samples")[0].replace(",", ""))
    db, snap = tmp_path / "live.duckdb", tmp_path / "snap.duckdb"
    ing = slicemeter("ingest", "--kafka", broker.bootstrap, "--db", str(db), "--tenants", "examples/demo.yaml",
                     "--group", "", "--until-idle", "5", "--snapshot", str(snap), "--snapshot-interval", "1")
    assert ing.returncode == 0, ing.stderr
    live = store.connect(db, read_only=True)  # ingest has exited: the live file holds every sample
    assert live.execute(store.sql_text("testkit/sample_checksum.sql")).fetchone()[0] == published
    live.close()
    con = store.connect(snap, read_only=True)  # readers use the snapshot: rollups, no raw samples
    assert rollup_samples(con) == published
    assert con.execute(store.sql_text("testkit/sample_checksum.sql")).fetchone()[0] == 0
    tenants = {r[0] for r in con.execute("SELECT DISTINCT tenant FROM slice_hour_tenant").fetchall()}
    assert tenants == {"acme", "globex", "initech", "hooli"}   # hooli's node joined 16 days before "now"
    assert con.execute("SELECT count(*) FROM gpu_hour WHERE metered_s > 0").fetchone()[0] > 0


@pytest.mark.broker
def test_metrics_and_snapshot_in_process(broker, tmp_path):
    from slicemeter.testkit.ingest_helpers import create_topic, produce_chunks
    from slicemeter.testkit.synth_ticks import fleet, messages

    create_topic(broker.bootstrap, partitions=2)
    _, produced = produce_chunks(broker.bootstrap, messages(fleet(4, ["https://acme:6443"]), recent_midnight_ms(), 60, 30))
    metrics = IngestMetrics()
    port = free_port()
    server, _thread = metrics.serve(port, addr="127.0.0.1")
    try:
        ing = Ingestor(IngestConfig(bootstrap=broker.bootstrap, db=tmp_path / "m.duckdb", group=None, until_idle_s=5,
                                    snapshot=tmp_path / "s.duckdb", snapshot_interval_s=0.5), metrics=metrics)
        ing.run()
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert f"slicemeter_ingest_samples_total {float(produced)}" in text
    assert 'slicemeter_ingest_lag_messages{partition="0"} 0.0' in text
    assert "slicemeter_ingest_batch_seconds_count" in text
    assert "slicemeter_ingest_dead_letters_total 0.0" in text
    snap = store.connect(tmp_path / "s.duckdb", read_only=True)
    assert rollup_samples(snap) == produced


@pytest.mark.parametrize("args, key", [
    (["--snapshot-interval", "0"], "--snapshot-interval"),
    (["--raw-retention-days", "-1"], "--raw-retention-days"),
    (["--tenants", "/nonexistent/t.yaml"], "--tenants"),
    (["--kamaji-kubeconfig", "/nonexistent/kubeconfig"], "--kamaji-kubeconfig: cannot read"),
    (["--kamaji-kubeconfig", "k", "--kamaji-in-cluster"], "choose one"),
    (["--kamaji-context", "mgmt"], "--kamaji-context needs --kamaji-kubeconfig"),
    (["--catalog-interval", "-5"], "--catalog-interval"),
    (["--kamaji-metrics", "http://127.0.0.1:9/metrics"], "--kamaji-metrics: cannot fetch"),
])
def test_ingest_config_errors_name_the_key(tmp_path, args, key):
    r = slicemeter("ingest", "--kafka", "127.0.0.1:9", "--db", str(tmp_path / "x.duckdb"), *args, timeout=60)
    assert r.returncode == 2 and key in r.stderr, r.stderr


def test_backfill_config_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("tenants: []\nnodes: 7\n")
    r = slicemeter("backfill", "--scenario", str(bad), "--start", "2026-11-01", "--days", "1", "--kafka", "127.0.0.1:9")
    assert r.returncode == 2 and "--scenario" in r.stderr, r.stderr
    r = slicemeter("backfill", "--scenario", "examples/demo.yaml", "--start", "2026-11-01", "--days", "0", "--kafka", "x:9")
    assert r.returncode == 2 and "--days" in r.stderr, r.stderr
