"""Tenants from Kamaji's TenantControlPlane API: the fixture's shape (the CRD's own schema),
aliases, cluster-identity normalisation, kubeconfig and in-cluster access over HTTPS,
re-sync with planes that come and go, and the /metrics fallback."""
from __future__ import annotations

import copy
import json
import logging
from datetime import datetime

import jsonschema
import pytest
import yaml

from slicemeter.ingest import kamaji, tenants
from slicemeter import store
from slicemeter.ingest.catalog_sync import CatalogSync, Source
from slicemeter.testkit.kube_api import DATA, TOKEN, KubeApi, MetricsServer, tcp_list
from slicemeter.common import ConfigError

SCHEMA = json.loads((DATA / "kamaji" / "tenantcontrolplane.schema.json").read_text())
METRICS = (DATA / "kamaji_metrics.txt").read_text()


def test_fixture_items_are_shaped_as_the_kamaji_crd_defines_them():
    doc = tcp_list()
    assert (doc["kind"], doc["apiVersion"], doc["metadata"]["resourceVersion"]) == \
        ("TenantControlPlaneList", "kamaji.clastix.io/v1alpha1", "48213")
    for item in doc["items"]:
        jsonschema.validate(item, SCHEMA)
    broken = copy.deepcopy(doc["items"][0])
    broken["spec"]["networkProfile"]["advertiseAdress"] = broken["spec"]["networkProfile"].pop("advertiseAddress")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)
    del broken["spec"]["kubernetes"]["version"]  # required by the CRD
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, SCHEMA)


def test_every_address_a_plane_answers_on_becomes_an_alias():
    by_name = {t.name: t for t in kamaji.parse_tcp_list(tcp_list())}
    assert sorted(by_name) == ["acme", "globex", "hooli", "initech"]
    acme = by_name["acme"]
    assert (acme.tcp_namespace, acme.tcp_name, acme.api_server) == ("tenant-acme", "acme", "https://10.20.0.10:6443")
    assert acme.aliases == (
        "https://10.20.0.10:6443",              # status.controlPlaneEndpoint (= the metric's address)
        "https://192.168.50.10:6443",           # advertiseAddress, with the endpoint's port
        "https://api.acme.tenants.example:6443",  # certSANs
        "https://acme-k8s.ingress.example:443",   # spec.controlPlane.ingress.hostname host:port
        "https://acme.tenant-acme.svc:6443",
        "https://acme.tenant-acme.svc.cluster.local:6443",
    )
    assert (acme.kubernetes_version, acme.admin_kubeconfig_secret, acme.source) == \
        ("v1.30.2", "acme-admin-kubeconfig", "kamaji-api")
    assert by_name["globex"].api_server == "https://[2001:db8:7::10]:6443"
    assert "https://[2001:db8:7::10]:6443" in by_name["globex"].aliases
    initech = by_name["initech"]  # not exposed yet: no endpoint, the spec's version and port
    assert initech.api_server is None and initech.kubernetes_version == "v1.29.6"
    assert initech.aliases[0] == "https://initech.tenants.example:6443"
    assert by_name["hooli"].removed_at == "2026-11-20T10:00:00Z"  # metadata.deletionTimestamp
    assert not any(t.removed_at for n, t in by_name.items() if n != "hooli")


@pytest.mark.parametrize("mutate, where", [
    (lambda i: i["spec"]["networkProfile"].update(certSANs="api.acme.tenants.example"),
     "items[0] (tenant-acme/acme).spec.networkProfile.certSANs"),
    (lambda i: i["status"].update(controlPlaneEndpoint=6443), "items[0] (tenant-acme/acme).status.controlPlaneEndpoint"),
    (lambda i: i["metadata"].pop("namespace"), "items[0].metadata"),
    (lambda i: i.update(kind="Pod"), "items[0].kind"),
])
def test_a_malformed_plane_is_an_error_naming_the_field(mutate, where):
    doc = tcp_list()
    mutate(doc["items"][0])
    with pytest.raises(ConfigError) as err:
        kamaji.parse_tcp_list(doc)
    assert str(err.value).startswith(where + ":"), str(err.value)


@pytest.mark.parametrize("identity, key", [
    ("https://acme.example:6443", "acme.example:6443"),
    ("HTTPS://ACME.Example:6443/", "acme.example:6443"),
    ("acme.example", "acme.example:6443"),
    ("https://acme.example", "acme.example:6443"),
    ("https://acme.example:443", "acme.example:443"),
    ("https://[2001:DB8:7::10]:6443", "[2001:db8:7::10]:6443"),
    ("2001:db8:7::10", "[2001:db8:7::10]:6443"),
    ("[2001:db8:7::10]", "[2001:db8:7::10]:6443"),
    ("10.20.0.10", "10.20.0.10:6443"),
    ("tenant-acme/acme", "tenant-acme/acme"),
])
def test_cluster_identity_is_normalised(tmp_path, identity, key):
    con = store.connect(tmp_path / "k.duckdb")
    assert con.execute("SELECT cluster_key(?)", [identity]).fetchone()[0] == key


def _hours(con, clusters: dict[str, int]):
    """One GPU-hour and one slice-hour per cluster, with the given sample counts."""
    for i, (cluster, samples) in enumerate(clusters.items()):
        con.execute("""INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s, sample_count)
                       VALUES (TIMESTAMP '2026-11-01 00:00:00', ?, ?, ?, 'NVIDIA L4', 24000000000, 3600, ?)""",
                    [cluster, f"node-{i}", f"GPU-{i}", samples])
        con.execute("""INSERT INTO slice_hour (hour, cluster, node, gpu_uuid, namespace, pod_uid, container, whole_gpu,
                       metered_s, sample_count, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
                       used_mem_share_s, used_sm_share_s, usage_share_s, hami_nvml_disagree_s)
                       VALUES (TIMESTAMP '2026-11-01 00:00:00', ?, ?, ?, 'ml', ?, 'main', false,
                               3600, ?, 900, 900, 900, 0, 0, 0, 0)""", [cluster, f"node-{i}", f"GPU-{i}", f"uid-{i}", samples])


def _owners(con) -> dict[str, str]:
    return dict(con.execute("SELECT cluster, tenant FROM slice_hour_tenant ORDER BY cluster").fetchall())


def _unassigned_samples(con) -> int:
    return con.execute("""SELECT coalesce(sum(sample_count), 0) FROM (
        SELECT sample_count FROM slice_hour_tenant WHERE tenant = 'unassigned'
        UNION ALL SELECT sample_count FROM gpu_hour_tenant WHERE tenant = 'unassigned')""").fetchone()[0]


def test_yaml_aliases_match_and_two_tenants_on_one_cluster_is_an_error_naming_both(tmp_path):
    con = store.connect(tmp_path / "y.duckdb")
    _hours(con, {"https://GPU.acme.example/": 10, "10.1.2.3": 20})
    good = tenants.parse_catalog(yaml.safe_load("""
tenants:
  - name: acme
    api_server: https://acme.example:6443
    aliases: ["gpu.acme.example:6443", "https://10.1.2.3:6443"]
"""))
    tenants.store_catalog(con, good)
    assert _owners(con) == {"https://GPU.acme.example/": "acme", "10.1.2.3": "acme"}
    clash = tenants.parse_catalog(yaml.safe_load("""
tenants:
  - name: acme
    api_server: https://acme.example:6443
  - name: globex
    api_server: https://globex.example
    aliases: ["HTTPS://ACME.EXAMPLE/"]
"""))
    with pytest.raises(ConfigError) as err:
        tenants.store_catalog(con, clash)
    assert "acme.example:6443 is claimed by acme and globex" in str(err.value)
    assert _owners(con) == {"https://GPU.acme.example/": "acme", "10.1.2.3": "acme"}  # the old catalog stands
    with pytest.raises(ConfigError, match=r"tenants\[0\]\.aliases\[0\]"):
        tenants.parse_catalog({"tenants": [{"name": "a", "aliases": [["x"]]}]})


# What the tenants' kubelets have in their kubeconfig (the exporter's --cluster): advertise
# addresses, certSANs without a port, IPv6 in any case or without brackets.
KUBELET_CLUSTERS = {
    "https://192.168.50.10:6443": ("acme", 360),              # spec.networkProfile.advertiseAddress
    "https://API.acme.tenants.example/": ("acme", 180),       # a certSAN, no port, upper case, slash
    "https://[2001:DB8:7::10]:6443": ("globex", 720),         # IPv6 endpoint, upper case
    "2001:db8:7::10": ("globex", 90),                         # IPv6 without brackets or port
    "https://initech.tenants.example:6443": ("initech", 45),  # a plane not exposed yet
    "https://10.20.0.40:6443": ("hooli", 30),                 # a plane being deleted
}


def test_kubeconfig_import_over_https_attributes_every_kubelet_address(tmp_path):
    con = store.connect(tmp_path / "a.duckdb")
    _hours(con, {c: n for c, (_, n) in KUBELET_CLUSTERS.items()})
    with KubeApi(page_size=3) as api:
        access = kamaji.load_kubeconfig(api.kubeconfig(tmp_path / "kubeconfig"))
        imported = kamaji.fetch_tenants(access)
        # 4 planes, pages of 3: the list was read with limit/continue, with the token
        assert [p for p, _ in api.requests] == [f"{kamaji.LIST_PATH}?limit={kamaji.PAGE_SIZE}",
                                                f"{kamaji.LIST_PATH}?limit={kamaji.PAGE_SIZE}&continue=3"]
        assert {auth for _, auth in api.requests} == {f"Bearer {TOKEN}"}
    tenants.store_catalog(con, tenants.merge(tenants.Catalog(), imported))
    assert _owners(con) == {c: t for c, (t, _) in KUBELET_CLUSTERS.items()}
    assert _unassigned_samples(con) == 0 and tenants.unassigned_clusters(con) == []
    # only the Secret's name is kept
    assert con.execute("SELECT admin_kubeconfig_secret FROM tenant_sources WHERE tenant = 'acme'").fetchone() == \
        ("acme-admin-kubeconfig",)


def test_the_metrics_fallback_shows_what_it_cannot_match_with_counts(tmp_path, caplog):
    con = store.connect(tmp_path / "m.duckdb")
    _hours(con, {c: n for c, (_, n) in KUBELET_CLUSTERS.items()})
    imported = tenants.parse_kamaji_metrics(METRICS)
    assert [(t.tcp_namespace, t.tcp_name, t.api_server, t.kubernetes_version) for t in imported] == [
        ("tenant-acme", "acme", "https://10.20.0.10:6443", "v1.30.2"),
        ("tenant-globex", "globex", "https://[2001:db8:7::10]:6443", "v1.31.0"),
        ("tenant-hooli", "hooli", "https://10.20.0.40:6443", "v1.30.2"),
        ("tenant-initech", "initech", None, "v1.29.6"),
    ]
    tenants.store_catalog(con, tenants.merge(tenants.Catalog(), imported))
    # the metric knows the management endpoint only: the advertise address, the certSAN and
    # the unexposed plane's kubelets bill as unassigned (each GPU and slice row counts)
    assert tenants.unassigned_clusters(con) == [
        ("https://192.168.50.10:6443", 720), ("https://API.acme.tenants.example/", 360),
        ("https://initech.tenants.example:6443", 90)]
    assert _unassigned_samples(con) == 720 + 360 + 90


def test_metrics_without_the_series_say_so_loudly(caplog):
    assert tenants.parse_kamaji_metrics(METRICS.replace("kamaji_tenant_control_plane_info", "kamaji_other_info")) == []
    unknown = tenants.parse_kamaji_metrics(
        'kamaji_tenant_control_plane_info{address="",datastore_driver="unknown",exposure_strategy="unknown",'
        'kubernetes_version="unknown",tcp_name="x",tcp_namespace="y"} 1\n')
    assert unknown[0].kubernetes_version is None
    with MetricsServer(b"# HELP kamaji_build_info Build information for Kamaji.\n") as srv:
        with caplog.at_level(logging.WARNING, logger="slicemeter.ingest.tenants"):
            assert tenants.fetch_kamaji_tenants(srv.url) == []
    assert "serves no kamaji_tenant_control_plane_info series" in caplog.text and "26.4.3-edge" in caplog.text


def test_client_certificate_and_in_cluster_credentials(tmp_path):
    with KubeApi(client_cert=True) as api:
        access = kamaji.load_kubeconfig(api.kubeconfig(tmp_path / "kc", user=KubeApi.client_cert_user()))
        assert access.token is None and access.client_cert_pem
        assert len(kamaji.fetch_tenants(access)) == 4
    with KubeApi() as api:
        sa = tmp_path / "sa"
        sa.mkdir()
        (sa / "token").write_text(TOKEN + "\n")
        (sa / "ca.crt").write_bytes((DATA / "kubelet-selfsigned.crt").read_bytes())
        port = api.url.rsplit(":", 1)[1]
        access = kamaji.in_cluster_access({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}, sa)
        assert len(kamaji.fetch_tenants(access)) == 4
        (sa / "token").write_text("rotated-and-wrong")  # re-read on every request
        with pytest.raises(ConfigError, match="HTTP 401"):
            kamaji.fetch_tenants(access)
        api.status = 403
        with pytest.raises(ConfigError, match="RBAC: list tenantcontrolplanes"):
            kamaji.fetch_tenants(access)
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        kamaji.in_cluster_access({}, tmp_path)


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.update({"current-context": "nope"}), "no context named 'nope'"),
    (lambda d: d["clusters"][0]["cluster"].update(server="http://127.0.0.1:1"), "is not an https:// URL"),
    (lambda d: d["users"][0].update(user={"exec": {"command": "aws"}}), "exec and auth-provider"),
    (lambda d: d["clusters"][0]["cluster"].update({"certificate-authority-data": "%%%"}), "certificate-authority-data is not base64"),
])
def test_a_bad_kubeconfig_is_an_error_naming_what(tmp_path, mutate, match):
    with KubeApi() as api:
        path = api.kubeconfig(tmp_path / "kc")
    doc = yaml.safe_load(path.read_text())
    mutate(doc)
    with pytest.raises(ConfigError, match=match):
        kamaji.access_from_kubeconfig(doc, tmp_path)


def test_resync_follows_planes_that_come_and_go(tmp_path):
    con = store.connect(tmp_path / "r.duckdb")
    later = {"https://10.20.0.77:6443": 12}  # a plane created after the first sync
    _hours(con, {c: n for c, (_, n) in KUBELET_CLUSTERS.items()} | later)
    with KubeApi() as api:
        access = kamaji.load_kubeconfig(api.kubeconfig(tmp_path / "kc"))
        sync = CatalogSync(con.cursor(), None, [Source("kamaji-api", lambda: kamaji.fetch_tenants(access))])
        sync.sync_once()
        assert tenants.unassigned_clusters(con) == [("https://10.20.0.77:6443", 24)]
        # hooli's deletion completes; a new plane of the same name is created elsewhere
        doc = tcp_list()
        doc["items"] = [i for i in doc["items"] if i["metadata"]["name"] != "hooli"]
        again = copy.deepcopy(doc["items"][2])
        again["metadata"].update(name="hooli", namespace="tenant-hooli-v2", uid="u-5")
        again["status"]["controlPlaneEndpoint"] = "10.20.0.77:6443"
        again["spec"]["networkProfile"]["certSANs"] = []
        api.doc = doc | {"items": doc["items"] + [again]}
        sync.sync_once()
        owners = _owners(con)
        assert owners["https://10.20.0.40:6443"] == "hooli"  # its stored hours keep their owner
        assert owners["https://10.20.0.77:6443"] == "hooli-2"  # a new tenant, not the old one's name
        sync.sync_once()  # and the names stay put from one round to the next
        assert _owners(con) == owners
        assert _unassigned_samples(con) == 0
        removed = con.execute("SELECT tenant, removed_at FROM tenant_sources WHERE removed_at IS NOT NULL").fetchall()
        assert removed == [("hooli", datetime(2026, 11, 20, 10, 0))]
        # a failed round keeps the catalog and is recorded
        api.status = 500
        with pytest.raises(ConfigError, match="HTTP 500"):
            sync.sync_once()
        assert _owners(con) == owners
    rows = con.execute("SELECT source, ok, tenants FROM catalog_syncs ORDER BY synced_at, ok DESC").fetchall()
    assert rows == [("kamaji-api", True, 4), ("kamaji-api", True, 5), ("kamaji-api", True, 5), ("kamaji-api", False, None)]


def test_a_removed_plane_yields_its_address_to_a_new_one(tmp_path):
    con = store.connect(tmp_path / "y.duckdb")
    _hours(con, {"https://10.20.0.40:6443": 5})
    planes = kamaji.parse_tcp_list(tcp_list())
    tenants.store_catalog(con, tenants.merge(tenants.Catalog(), planes))
    assert _owners(con) == {"https://10.20.0.40:6443": "hooli"}
    doc = tcp_list()
    newcomer = next(i for i in doc["items"] if i["metadata"]["name"] == "initech")
    newcomer["status"]["controlPlaneEndpoint"] = "10.20.0.40:6443"  # hooli's address, reused
    doc["items"] = [i for i in doc["items"] if i["metadata"]["name"] != "hooli"]
    merged = tenants.carry_removed(tenants.stored_tenants(con), tenants.merge(tenants.Catalog(), kamaji.parse_tcp_list(doc)),
                                   "2026-11-21T00:00:00+00:00")
    tenants.store_catalog(con, merged)
    assert _owners(con) == {"https://10.20.0.40:6443": "initech"}
    assert "hooli" in {t.name for t in tenants.stored_tenants(con)}


@pytest.mark.broker
def test_a_fleet_on_advertise_addresses_and_ipv6_bills_nothing_unassigned(broker, tmp_path):
    """End to end: Ticks from kubelets on every address form through the real broker and
    `slicemeter ingest --kamaji-kubeconfig`; then the same store through the metrics
    fallback, which names the clusters it cannot match with their sample counts."""
    import subprocess

    from slicemeter.testkit.ingest_helpers import SLICEMETER, create_topic, produce_chunks
    from slicemeter.testkit.synth_ticks import SynthNode, messages, recent_start_ms

    nodes = [SynthNode(node=f"gpu-node-{i}", cluster=c, gpus=2, slices_per_gpu=2, model_index=i)
             for i, c in enumerate(KUBELET_CLUSTERS)]
    create_topic(broker.bootstrap, partitions=2)
    _, produced = produce_chunks(broker.bootstrap, list(messages(nodes, recent_start_ms(30), ticks=30, ticks_per_message=10)))
    db = tmp_path / "fleet.duckdb"

    def ingest(*extra: str) -> str:
        run = subprocess.run([*SLICEMETER, "ingest", "--kafka", broker.bootstrap, "--db", str(db), "--group", "",
                              "--until-idle", "5", "--catalog-interval", "0", *extra],
                             capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr[-3000:]
        return run.stderr

    with KubeApi() as api:
        log = ingest("--kamaji-kubeconfig", str(api.kubeconfig(tmp_path / "kubeconfig")))
    assert "every stored cluster matched" in log
    con = store.connect(db, read_only=True)
    try:
        stored = con.execute("SELECT sum(sample_count) FROM gpu_hour").fetchone()[0] + \
            con.execute("SELECT sum(sample_count) FROM slice_hour").fetchone()[0]
        assert stored == produced
        assert _unassigned_samples(con) == 0
        assert _owners(con) == {c: t for c, (t, _) in KUBELET_CLUSTERS.items()}
    finally:
        con.close()

    with MetricsServer(METRICS.encode()) as srv:
        log = ingest("--kamaji-metrics", srv.url)
    per_node = produced // len(nodes)
    unmatched = ["https://192.168.50.10:6443", "https://API.acme.tenants.example/", "https://initech.tenants.example:6443"]
    con = store.connect(db, read_only=True)
    try:
        assert sorted(tenants.unassigned_clusters(con)) == sorted((c, per_node) for c in unmatched)
        assert _unassigned_samples(con) == 3 * per_node
    finally:
        con.close()
    assert "3 stored cluster(s) match none" in log
    for c in unmatched:
        assert f"{c} ({per_node} samples)" in log


def test_two_removed_planes_on_one_address_leave_it_to_the_last_removed(tmp_path):
    con = store.connect(tmp_path / "rr.duckdb")
    _hours(con, {"https://10.20.0.40:6443": 5})
    old = tenants.Tenant("hooli", tcp_namespace="tenant-hooli", tcp_name="hooli", api_server="https://10.20.0.40:6443",
                         source="kamaji-api", removed_at="2026-11-20T10:00:00Z")
    newer = tenants.Tenant("pied", tcp_namespace="tenant-pied", tcp_name="pied", aliases=("https://10.20.0.40",),
                           source="kamaji-api", removed_at="2026-11-25T10:00:00Z")
    tenants.store_catalog(con, tenants.Catalog(tenants=[old, newer]))
    assert _owners(con) == {"https://10.20.0.40:6443": "pied"}


def test_a_scenario_with_ipv6_and_aliases_is_also_the_ingest_catalog(tmp_path):
    from slicemeter.simulator.scenario import parse_scenario

    text = """
tenants:
  - name: globex
    kamaji: {namespace: tenant-globex, name: globex}
    api_server: https://[2001:db8:7::10]:6443
    aliases: ["https://globex.tenants.example"]
nodes:
  - name: gpu-node-1
    tenant: globex
    gpus: [{model: "NVIDIA L4", count: 1}]
    pods: []
"""
    scenario = parse_scenario(text)
    assert scenario.nodes[0].cluster == "https://[2001:db8:7::10]:6443"
    catalog = tenants.parse_catalog(yaml.safe_load(text))
    assert catalog.tenants[0].aliases == ("https://globex.tenants.example",)
    with pytest.raises(Exception, match=r"tenants\[0\]\.aliases\[0\]"):
        parse_scenario(text.replace('["https://globex.tenants.example"]', "[7]"))


def test_the_metrics_fallback_is_used_when_the_api_fails(tmp_path, caplog):
    con = store.connect(tmp_path / "f.duckdb")
    with KubeApi() as api, MetricsServer(METRICS.encode()) as srv:
        api.status = 403
        access = kamaji.load_kubeconfig(api.kubeconfig(tmp_path / "kc"))
        sync = CatalogSync(con.cursor(), None, [Source("kamaji-api", lambda: kamaji.fetch_tenants(access)),
                                               Source("kamaji-metrics", lambda: tenants.fetch_kamaji_tenants(srv.url))])
        with caplog.at_level(logging.WARNING, logger="slicemeter.ingest.catalog"):
            catalog = sync.sync_once()
    assert [t.source for t in catalog.tenants] == ["kamaji-metrics"] * 4
    assert "HTTP 403" in caplog.text and "trying kamaji-metrics" in caplog.text
    assert con.execute("SELECT source, ok FROM catalog_syncs").fetchall() == [("kamaji-metrics", True)]


def test_a_list_of_something_else_is_refused(tmp_path):
    with KubeApi(doc={"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": []}) as api:
        access = kamaji.load_kubeconfig(api.kubeconfig(tmp_path / "kc"))
        with pytest.raises(ConfigError, match="expected kind TenantControlPlaneList, got 'PodList'"):
            kamaji.fetch_tenants(access)
