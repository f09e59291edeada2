"""What every store must do alike, run on each backend (tests/conftest.py any_store: a
DuckDB file, and a DuckLake on a throwaway PostgreSQL where the lake's extensions exist):
the tenant catalog (YAML, a Kamaji import, aliases, overrides, budgets), bindings, a
month's close with late data (corrections), kept money and the export. A store operation
added for one backend only fails here on the other. The figures asserted are literal, so
both backends are held to the same bill."""
from __future__ import annotations

import hashlib
import subprocess
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path

import yaml

from slicemeter import store
from slicemeter.chargeback.bill import compute_bill, parse_month
from slicemeter.chargeback.kept import keep_hours, kept_current
from slicemeter.ingest import kamaji, tenants
from slicemeter.ingest.bindings_cli import move_binding
from slicemeter.testkit.cb_rows import add_tenants
from slicemeter.testkit.ingest_helpers import StoreWriter
from slicemeter.testkit.kept_case import PRICES, PRICES_FILE_TEXT, write_arrivals
from slicemeter.testkit.kube_api import KubeApi

NOVEMBER = parse_month("2026-11")
CASE = {"seed": 11, "nvml_down": {2, 17, 40}, "move_at": 4, "late_before_close": 0.3, "late_after_close": 0.2,
        "batch": 2}
CATALOG = """
tenants:
  - name: acme
    display_name: ACME Research
    kamaji: {namespace: tenant-acme, name: acme}
    api_server: https://acme.tenants.example:6443
    aliases: ["gpu.acme.example:6443", "gpu.acme.example:6443"]
    monthly_budget: "1200.50"
    namespace_overrides: [{namespace: tools, tenant: acme}, {namespace: tools, tenant: umbrella}]
  - name: umbrella
    api_server: https://umbrella.example
"""


def test_the_catalog_from_yaml_and_kamaji(any_store, tmp_path):
    """The YAML wins names and budgets, Kamaji adds every address of its planes as aliases
    and the planes the YAML does not name; storing again replaces the whole catalog."""
    con = store.connect(any_store)
    try:
        with KubeApi() as api:
            imported = kamaji.fetch_tenants(kamaji.load_kubeconfig(api.kubeconfig(tmp_path / "kubeconfig")))
        catalog = tenants.merge(tenants.parse_catalog(yaml.safe_load(CATALOG)), imported)
        tenants.store_catalog(con, catalog)
        stored = {t.name: t for t in tenants.stored_tenants(con)}
        assert sorted(stored) == ["acme", "globex", "hooli", "initech", "umbrella"]
        assert stored["acme"].monthly_budget == Decimal("1200.50")
        assert stored["acme"].source == "kamaji-api" and stored["umbrella"].source == "yaml"
        assert "gpu.acme.example:6443" in stored["acme"].aliases and "https://192.168.50.10:6443" in stored["acme"].aliases
        assert con.execute("SELECT * FROM tenant_namespace_overrides").fetchall() == [
            ("https://acme.tenants.example:6443", "tools", "umbrella")]
        tenants.record_sync(con, "kamaji-api", True, catalog)
        tenants.store_catalog(con, tenants.parse_catalog({"tenants": [{"name": "solo", "api_server": "https://solo"}]}))
        assert [t.name for t in tenants.stored_tenants(con)] == ["solo"]
        assert con.execute("SELECT count(*) FROM tenant_aliases").fetchone() == (0,)
        assert con.execute("SELECT source, ok, tenants FROM catalog_syncs").fetchall() == [("kamaji-api", True, 5)]
    finally:
        con.close()


def test_bindings_move(any_store):
    """`slicemeter bindings move`: a bound GPU moves, keeping where it was; an unbound node is bound."""
    con = store.connect(any_store)
    try:
        con.execute("INSERT INTO ingest_bindings (kind, name, cluster, bound_at) "
                    "VALUES ('gpu', 'GPU-a', 'https://acme:6443', now())")
        assert move_binding(con, "gpu", "GPU-a", "https://beta:6443") == "https://acme:6443"
        assert move_binding(con, "node", "node-1", "https://beta:6443") is None
        assert con.execute("SELECT kind, name, cluster, moved_from FROM ingest_bindings ORDER BY ALL").fetchall() == [
            ("gpu", "GPU-a", "https://beta:6443", "https://acme:6443"), ("node", "node-1", "https://beta:6443", None)]
    finally:
        con.close()


# the November bill of the kept-money case (testkit/kept_case.py), October's late Ticks
# carried as corrections: each tenant's cost, as a single file bills it
NOVEMBER_COST = {("Regular", "acme"): Decimal("14.46"), ("Regular", "globex"): Decimal("13.90"),
                 ("Regular", "platform"): Decimal("1.33"), ("Correction", "globex"): Decimal("2.41")}


def _export(db: str, out: Path, prices: Path) -> dict[str, str]:
    done = subprocess.run([sys.executable, "-c", "import sys; from slicemeter.cli import main; sys.exit(main())",
                           "export", "--db", db, "--month", "2026-11", "--out", str(out), "--prices", str(prices)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.iterdir())}


def test_close_late_data_kept_money_and_export(any_store, tmp_path):
    """Ticks on time and late, October closed, more of October after the close; the money
    kept again for the two days; the November bill carries October's corrections."""
    con = store.connect(any_store)
    writer = StoreWriter(con)
    try:
        add_tenants(con)
        write_arrivals(con, writer.write, CASE, CASE["batch"])
        keep_hours(con, date(2026, 10, 31), date(2026, 11, 2))
        assert kept_current(con, *NOVEMBER)
        bill = compute_bill(con, "2026-11", prices=PRICES)
        cost = {(c, t): sum(rows["cost"], Decimal(0)).quantize(Decimal("0.01"))
                for (c, t), rows in bill.invoice.groupby(["charge_class", "tenant"])}
        assert cost == NOVEMBER_COST
    finally:
        con.close()
    prices = tmp_path / "prices.yaml"
    prices.write_text(PRICES_FILE_TEXT)
    assert len(_export(any_store, tmp_path / "out", prices)) == 5



def test_a_tenant_scoped_read_sees_its_own_rows_and_no_others(any_store):
    """The dashboard's connection for one tenant (dashboard/data.py open_db) reads that
    tenant's GPU-hours and slice-hours, all of them and no other's, on either backend: the
    kept-money fleet, whose gpu-node-1 moves from acme's cluster to globex's."""
    from slicemeter.dashboard import data
    from slicemeter.testkit.cb_rows import ACME, GLOBEX

    con = store.connect(any_store)
    writer = StoreWriter(con)
    try:
        add_tenants(con)
        write_arrivals(con, writer.write, CASE, CASE["batch"])
    finally:
        con.close()
    gpus, slices = "SELECT cluster, node, gpu_uuid, hour FROM gpu_hour", "SELECT cluster, pod, hour FROM slice_hour"
    with data.open_db(any_store, None) as whole:
        every = {q: set(whole.execute(q).fetchall()) for q in (gpus, slices)}
    for tenant, cluster in (("acme", ACME), ("globex", GLOBEX)):
        with data.open_db(any_store, tenant) as scoped:
            for q in (gpus, slices):
                mine = {row for row in every[q] if row[0] == cluster}
                assert mine and set(scoped.execute(q).fetchall()) == mine, (tenant, q)
    assert {node for cluster, node, *_ in every[gpus] if cluster == GLOBEX} >= {"gpu-node-1", "gpu-node-2"}
