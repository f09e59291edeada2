"""One canonical form of a cluster identity, on both sides of the match: a Tick whose
cluster spells its API server's address differently from the tenant catalog (Kamaji
writes spec.networkProfile.address verbatim into status.controlPlaneEndpoint, and kubelets
join on that string) bills to that tenant, not to 'unassigned'."""
from __future__ import annotations

import copy
import subprocess
from decimal import Decimal

import pytest

from slicemeter import store
from slicemeter.chargeback.prices import Override
from slicemeter.common import cluster_key
from slicemeter.testkit.ingest_helpers import SLICEMETER, create_topic, produce_chunks
from slicemeter.testkit.kube_api import KubeApi, tcp_list
from slicemeter.testkit.synth_ticks import SynthNode, messages, recent_start_ms

SPELLINGS = [
    ("https://[2001:db8:40::10]:6443", "[2001:db8:40::10]:6443"),
    ("https://[2001:0db8:40::10]:6443", "[2001:db8:40::10]:6443"),         # leading zeros in a group
    ("https://[2001:0DB8:0040:0000:0000:0000:0000:0010]", "[2001:db8:40::10]:6443"),  # upper case, no port
    ("HTTPS://[2001:DB8:40::10]:6443/", "[2001:db8:40::10]:6443"),
    ("2001:db8:40::10", "[2001:db8:40::10]:6443"),                          # bare, no brackets
    ("https://[2001:db8:40::10]:06443", "[2001:db8:40::10]:6443"),          # port with a leading zero
    ("https://[::ffff:10.20.0.50]:6443", "10.20.0.50:6443"),                # IPv4-mapped IPv6
    ("https://[::FFFF:0a14:0032]", "10.20.0.50:6443"),
    ("https://10.20.0.50", "10.20.0.50:6443"),
    ("https://API.Hooli.Example.:6443/", "api.hooli.example:6443"),        # a DNS name's trailing dot
    ("api.hooli.example", "api.hooli.example:6443"),
    ("https://api.hooli.example:443", "api.hooli.example:443"),            # another port is another endpoint
    ("tenant-acme/acme", "tenant-acme/acme"),                               # namespace/name: as written
    ("Tenant-Acme/ACME", "tenant-acme/acme"),
    # not an address: kept as written (lower-cased), matching only itself
    ("https://[10.20.0.50]:6443", "[10.20.0.50]:6443"),
    ("https://[not-an-ip]:6443", "[not-an-ip]:6443"),
    ("https://acme:99999", "acme:99999"),
    ("https://010.20.0.50:6443", "010.20.0.50:6443"),                      # leading zeros in IPv4: not an IP (Go's ParseIP)
]


def test_cluster_key_in_python_and_in_sql_agree_on_every_spelling(tmp_path):
    con = store.connect(tmp_path / "k.duckdb")
    try:
        for identity, key in SPELLINGS:
            assert cluster_key(identity) == key, identity
            assert con.execute("SELECT cluster_key(?)", [identity]).fetchall() == [(key,)], identity
        assert con.execute("SELECT cluster_key(NULL)").fetchall() == [(None,)]
    finally:
        con.close()


def test_a_pool_price_applies_to_every_spelling_of_its_cluster():
    pool = Override(Decimal("2.00"), pool="https://[2001:db8:40::10]:6443")
    assert pool.matches("NVIDIA L4", "n1", "https://[2001:0DB8:40:0::10]")
    assert not pool.matches("NVIDIA L4", "n1", "https://[2001:db8:40::11]:6443")


# Tick cluster (as a kubelet spells it) -> tenant whose catalog entry names it canonically
TICK_CLUSTERS = {
    "https://[2001:0db8:40::10]:6443": "acme",
    "HTTPS://[2001:DB8:7:0:0:0:0:10]": "globex",
    "https://[::ffff:10.20.0.50]:6443": "initech",
    "https://API.Hooli.example.:6443/": "hooli",
    "https://[2001:db8:40::0011]:06443": "umbrella",
}
CATALOG = """tenants:
  - {name: acme, api_server: "https://[2001:db8:40::10]:6443"}
  - {name: globex, api_server: "https://[2001:db8:7::10]:6443"}
  - {name: initech, api_server: "https://10.20.0.50:6443"}
  - {name: hooli, api_server: "https://api.hooli.example"}
  - {name: umbrella, aliases: ["https://[2001:db8:40::11]:6443"]}
"""
# Kamaji's fixture plane globex, its address written with leading zeros: Kamaji copies it
# into status.controlPlaneEndpoint, and its kubelets join on that string
KAMAJI_SPELLING = "https://[2001:0db8:0007::0010]:6443"


def _kamaji_list_with_verbatim_address() -> dict:
    doc = copy.deepcopy(tcp_list())
    (plane,) = [i for i in doc["items"] if i["metadata"]["name"] == "globex"]
    plane["spec"]["networkProfile"]["address"] = "2001:0db8:0007::0010"
    plane["status"]["controlPlaneEndpoint"] = "[2001:0db8:0007::0010]:6443"
    return doc


def _owners(db) -> tuple[dict[str, str], int]:
    con = store.connect(db, read_only=True)
    try:
        owners = dict(con.execute("SELECT DISTINCT cluster, tenant FROM slice_hour_tenant").fetchall())
        unassigned = con.execute("SELECT count(*) FROM gpu_hour_tenant WHERE tenant = 'unassigned'").fetchall()[0][0]
        return owners, unassigned
    finally:
        con.close()


@pytest.mark.broker
def test_ticks_spelling_their_cluster_differently_bill_to_its_tenant(broker, tmp_path):
    clusters = [*TICK_CLUSTERS, KAMAJI_SPELLING]
    nodes = [SynthNode(node=f"gpu-node-{i}", cluster=c, gpus=1, slices_per_gpu=2) for i, c in enumerate(clusters)]
    create_topic(broker.bootstrap, partitions=2)
    produce_chunks(broker.bootstrap, list(messages(nodes, recent_start_ms(12), ticks=12, ticks_per_message=6)))
    (tmp_path / "tenants.yaml").write_text(CATALOG)

    def ingest(db, *catalog: str) -> None:
        run = subprocess.run([*SLICEMETER, "ingest", "--kafka", broker.bootstrap, "--db", str(db), "--group", "",
                              "--until-idle", "5", "--catalog-interval", "0", *catalog],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]

    ingest(tmp_path / "yaml.duckdb", "--tenants", str(tmp_path / "tenants.yaml"))
    owners, unassigned = _owners(tmp_path / "yaml.duckdb")
    assert {c: owners[c] for c in TICK_CLUSTERS} == TICK_CLUSTERS
    assert owners[KAMAJI_SPELLING] == "globex" and unassigned == 0

    with KubeApi(_kamaji_list_with_verbatim_address()) as api:
        ingest(tmp_path / "kamaji.duckdb", "--kamaji-kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")))
    owners, _ = _owners(tmp_path / "kamaji.duckdb")
    assert owners[KAMAJI_SPELLING] == "globex"


def test_a_tenant_scoped_dashboard_applies_a_namespace_override_to_every_spelling(tmp_path):
    """Unscoped, a slice of acme's cluster in namespace shared-tools bills to initech (the
    override); a dashboard scoped to initech shows it, and one scoped to acme does not."""
    from slicemeter.dashboard import data
    from slicemeter.ingest import tenants

    db = tmp_path / "scope.duckdb"
    con = store.connect(db)
    try:
        tenants.store_catalog(con, tenants.Catalog(
            tenants=[tenants.Tenant("acme", api_server="https://[2001:db8:40::10]:6443"), tenants.Tenant("initech")],
            overrides=[tenants.Override("https://[2001:db8:40::10]:6443", "shared-tools", "initech")]))
        con.execute("""INSERT INTO slice_hour (hour, cluster, node, gpu_uuid, namespace, pod_uid, container, whole_gpu,
                       metered_s, sample_count, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
                       used_mem_share_s, used_sm_share_s, usage_share_s, hami_nvml_disagree_s)
                       VALUES (TIMESTAMP '2026-11-01 00:00:00', 'HTTPS://[2001:DB8:40::10]', 'n1', 'GPU-1',
                               'shared-tools', 'uid-1', 'main', false, 3600, 360, 900, 900, 900, 0, 0, 0, 0)""")
        assert con.execute("SELECT tenant FROM slice_hour_tenant").fetchall() == [("initech",)]
    finally:
        con.close()
    for tenant, rows in (("initech", 1), ("acme", 0)):
        with data.open_db(db, tenant) as scoped:
            assert scoped.execute("SELECT count(*) FROM slice_hour").fetchall() == [(rows,)], tenant
