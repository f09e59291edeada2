"""The tenant catalog on a DuckLake: stored with the same statements as in a file (a lake's
tables have no keys), so a lake worker with `--tenants` or a Kamaji import bills each
tenant what a plain file on the same topic bills, to the cent."""
from __future__ import annotations

import csv
import subprocess
import threading
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
import yaml

from slicemeter import store
from slicemeter.common import ConfigError
from slicemeter.ingest import tenants
from slicemeter.testkit.ingest_helpers import SLICEMETER, create_topic, produce_chunks
from slicemeter.testkit.kube_api import KubeApi
from slicemeter.testkit.synth_ticks import SynthNode, messages, recent_start_ms

REPO = Path(__file__).resolve().parents[2]

CATALOG = """
tenants:
  - name: acme
    api_server: https://acme.example:6443
    aliases: ["gpu.acme.example:6443", "https://10.1.2.3:6443", "gpu.acme.example:6443"]
    monthly_budget: "1200.50"
    namespace_overrides: [{namespace: tools, tenant: globex}, {namespace: tools, tenant: initech}]
  - name: globex
    api_server: https://globex.example
  - name: initech
    kamaji: {namespace: tenant-initech, name: initech}
"""


def _stored(con) -> tuple:
    return (tenants.stored_tenants(con),
            con.execute("SELECT * FROM tenant_namespace_overrides ORDER BY ALL").fetchall(),
            con.execute("SELECT tenant, identity FROM tenant_identity ORDER BY ALL").fetchall())


def test_the_catalog_stores_on_a_lake_as_in_a_file(lake_db, tmp_path):
    """Aliases named twice and an override given twice (the last wins) store alike; a
    clash stores nothing and the catalog before it stands; storing again replaces."""
    target, _ = lake_db
    catalog = tenants.parse_catalog(yaml.safe_load(CATALOG))
    clash = tenants.parse_catalog({"tenants": [{"name": "acme", "api_server": "https://acme.example:6443"},
                                               {"name": "globex", "aliases": ["HTTPS://ACME.EXAMPLE/"]}]})
    smaller = tenants.parse_catalog({"tenants": [{"name": "globex", "api_server": "https://globex.example"}]})
    seen = {}
    for name, db in (("file", tmp_path / "c.duckdb"), ("lake", target)):
        con = store.connect(db)
        try:
            tenants.store_catalog(con, catalog)
            first = _stored(con)
            with pytest.raises(ConfigError, match="acme.example:6443 is claimed by acme and globex"):
                tenants.store_catalog(con, clash)
            assert _stored(con) == first
            tenants.store_catalog(con, smaller)
            seen[name] = (first, _stored(con))
        finally:
            con.close()
    assert seen["lake"] == seen["file"]
    first, after = seen["lake"]
    acme = first[0][0]
    assert acme.aliases == ("gpu.acme.example:6443", "https://10.1.2.3:6443") and str(acme.monthly_budget) == "1200.500000"
    assert first[1] == [("https://acme.example:6443", "tools", "initech")]
    assert [t.name for t in after[0]] == ["globex"] and after[1] == []


def test_two_lake_workers_storing_the_catalog_at_once_both_succeed(lake_db):
    """Both replace the catalog (deletes: the later commit conflicts and is stored again)."""
    target, _ = lake_db
    catalog = tenants.parse_catalog(yaml.safe_load(CATALOG))
    cons = [store.connect(target) for _ in range(2)]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def store_it(con) -> None:
        try:
            start.wait()
            for _ in range(3):
                tenants.store_catalog(con, catalog)
                tenants.record_sync(con, "yaml", True, catalog)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=store_it, args=(con,)) for con in cons]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    try:
        assert not errors, errors
        assert [t.name for t in tenants.stored_tenants(cons[0])] == ["acme", "globex", "initech"]
        assert cons[0].execute("SELECT count(*) FROM tenant_aliases").fetchone() == (2,)
        assert cons[0].execute("SELECT count(*) FROM catalog_syncs").fetchone() == (6,)
    finally:
        for con in cons:
            con.close()


def _ingest(bootstrap: str, db: str, *extra: str, topic: str = "slicemeter.ticks") -> str:
    done = subprocess.run([*SLICEMETER, "ingest", "--kafka", bootstrap, "--db", db, "--group", "", "--topic", topic,
                           "--until-idle", "5", "--catalog-interval", "0", *extra],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def _export(db: str, month: str, out: Path) -> dict[str, bytes]:
    done = subprocess.run([*SLICEMETER, "export", "--db", db, "--month", month, "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".csv"}


def _invoice_by_tenant(files: dict[str, bytes]) -> dict[str, Decimal]:
    """Each tenant's cost on the month's invoice, exact."""
    invoice = next(body for name, body in files.items() if name.startswith("invoice-"))
    by_tenant: dict[str, Decimal] = {}
    for row in csv.DictReader(invoice.decode().splitlines()):
        by_tenant[row["tenant"]] = by_tenant.get(row["tenant"], Decimal(0)) + Decimal(row["cost"] or 0)
    return by_tenant


def _file_and_lake_exports(bootstrap: str, target: str, lake_data: Path, tmp_path: Path, month: str,
                           *catalog: str) -> tuple[dict, dict, str]:
    file_db = str(tmp_path / "plain.duckdb")
    _ingest(bootstrap, file_db, *catalog)
    log = _ingest(bootstrap, target, "--lake-data", str(lake_data), *catalog)
    return _export(file_db, month, tmp_path / "file-out"), _export(target, month, tmp_path / "lake-out"), log


@pytest.mark.broker
def test_a_lake_worker_with_the_demo_catalog_bills_what_a_file_bills(broker, lake_db, tmp_path, monkeypatch):
    target, data = lake_db
    monkeypatch.setenv("SLICEMETER_NOW", "2026-11-02T00:00:00Z")
    bf = subprocess.run([*SLICEMETER, "backfill", "--scenario", "examples/demo.yaml", "--start", "2026-11-01",
                         "--days", "0.125", "--kafka", broker.bootstrap, "--interval", "30"],
                        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert bf.returncode == 0, bf.stderr
    file_out, lake_out, log = _file_and_lake_exports(broker.bootstrap, target, data, tmp_path, "2026-11",
                                                     "--tenants", "examples/demo.yaml")
    assert "every stored cluster matched" in log
    by_tenant = _invoice_by_tenant(lake_out)
    # the shared-tools namespace override bills initech on acme's cluster
    assert {"acme", "globex", "initech", "hooli"} <= set(by_tenant) and "unassigned" not in by_tenant
    assert by_tenant == _invoice_by_tenant(file_out)
    assert lake_out == file_out     # invoice, FOCUS and unmetered CSVs, byte for byte


# kubelets on the addresses Kamaji lists for its planes (tests/test_ingest_kamaji.py)
KUBELET_CLUSTERS = ["https://192.168.50.10:6443", "https://API.acme.tenants.example/", "https://[2001:DB8:7::10]:6443",
                    "https://initech.tenants.example:6443", "https://10.20.0.40:6443"]


@pytest.mark.broker
def test_a_lake_worker_with_a_kamaji_import_bills_what_a_file_bills(broker, lake_db, tmp_path):
    target, data = lake_db
    nodes = [SynthNode(node=f"gpu-node-{i}", cluster=c, gpus=2, slices_per_gpu=2, model_index=i % 2)
             for i, c in enumerate(KUBELET_CLUSTERS)]
    create_topic(broker.bootstrap, partitions=2)
    start = recent_start_ms(30)
    produce_chunks(broker.bootstrap, list(messages(nodes, start, ticks=30, ticks_per_message=10)))
    month = pd.Timestamp(start, unit="ms").strftime("%Y-%m")
    with KubeApi() as api:
        kubeconfig = str(api.kubeconfig(tmp_path / "kubeconfig"))
        file_out, lake_out, log = _file_and_lake_exports(broker.bootstrap, target, data, tmp_path, month,
                                                         "--kamaji-kubeconfig", kubeconfig)
    assert "every stored cluster matched" in log
    con = store.connect(target, read_only=True)
    try:
        owners = dict(con.execute("SELECT DISTINCT cluster, tenant FROM slice_hour_tenant").fetchall())
        assert con.execute("SELECT count(*) FROM tenant_aliases").fetchone()[0] > len(KUBELET_CLUSTERS)
    finally:
        con.close()
    assert owners == {KUBELET_CLUSTERS[0]: "acme", KUBELET_CLUSTERS[1]: "acme", KUBELET_CLUSTERS[2]: "globex",
                      KUBELET_CLUSTERS[3]: "initech", KUBELET_CLUSTERS[4]: "hooli"}
    assert _invoice_by_tenant(lake_out) == _invoice_by_tenant(file_out)
    assert lake_out == file_out

