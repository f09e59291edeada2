"""Tenant catalog: YAML, Kamaji /metrics import, attribution and re-attribution."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slicemeter import store
from slicemeter.ingest import tenants
from slicemeter.testkit.kube_api import MetricsServer
from slicemeter.common import ConfigError

DATA = Path(__file__).parent / "data"

CATALOG = """
tenants:
  - name: acme
    display_name: ACME Research
    kamaji: {namespace: tenant-acme, name: acme}
    api_server: https://acme.tenants.example:6443
    cost_center: CC-1001
    namespace_overrides: [{namespace: shared-tools, tenant: platform}]
  - name: platform
    display_name: Platform team
    kamaji: {namespace: tenant-platform, name: platform}
    api_server: https://platform.tenants.example:6443
"""


def _write(tmp_path, text):
    p = tmp_path / "tenants.yaml"
    p.write_text(text)
    return p


def test_yaml_catalog_loads(tmp_path):
    cat = tenants.load_catalog(_write(tmp_path, CATALOG))
    assert [t.name for t in cat.tenants] == ["acme", "platform"]
    acme = cat.tenants[0]
    assert (acme.tcp_namespace, acme.tcp_name, acme.cost_center) == ("tenant-acme", "acme", "CC-1001")
    assert cat.overrides == [tenants.Override("https://acme.tenants.example:6443", "shared-tools", "platform")]


def test_a_catalog_that_is_not_a_list_names_the_key(tmp_path):
    path = _write(tmp_path, "\ntenants: {acme: 1}\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: tenants: expected a list, got dict"):
        tenants.load_catalog(path)
    with pytest.raises(ConfigError, match=r"^tenants\[0\]: needs api_server, aliases or kamaji"):
        tenants.parse_catalog({"tenants": [{"name": "a"}]})     # a parsed document: the key, no line


def test_unreadable_catalog_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"tenants\.yaml:1: not valid YAML"):
        tenants.load_catalog(_write(tmp_path, "tenants: [unclosed"))
    with pytest.raises(ConfigError, match="--tenants: cannot read"):
        tenants.load_catalog(tmp_path / "absent.yaml")


def _slice_rows(con):
    # rollup rows of three clusters: acme, platform and one the catalog does not know
    rows = [("https://acme.tenants.example:6443", "team-a"), ("https://acme.tenants.example:6443", "shared-tools"),
            ("https://platform.tenants.example:6443", "infra"), ("https://stray.example:6443", "x")]
    for i, (cluster, ns) in enumerate(rows):
        con.execute("""INSERT INTO slice_hour (hour, cluster, node, gpu_uuid, namespace, pod_uid, container, whole_gpu,
                       metered_s, sample_count, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
                       used_mem_share_s, used_sm_share_s, usage_share_s, hami_nvml_disagree_s)
                       VALUES (TIMESTAMP '2026-11-01 00:00:00', ?, 'n', 'GPU-1', ?, ?, 'main', false,
                               3600, 360, 900, 900, 900, 0, 0, 0, 0)""", [cluster, ns, f"uid-{i}"])


def _attribution(con):
    return dict(con.execute("SELECT pod_uid, tenant FROM slice_hour_tenant ORDER BY pod_uid").fetchall())


def test_attribution_unassigned_and_reattribution(tmp_path):
    con = store.connect(tmp_path / "t.duckdb")
    _slice_rows(con)
    tenants.store_catalog(con, tenants.load_catalog(_write(tmp_path, CATALOG)))
    assert _attribution(con) == {"uid-0": "acme", "uid-1": "platform", "uid-2": "platform", "uid-3": "unassigned"}
    # the stray cluster is adopted by a new tenant; acme's override is dropped
    doc = yaml.safe_load(CATALOG)
    doc["tenants"][0].pop("namespace_overrides")
    doc["tenants"].append({"name": "stray", "api_server": "https://stray.example:6443"})
    tenants.store_catalog(con, tenants.load_catalog(_write(tmp_path, yaml.safe_dump(doc))))
    assert _attribution(con) == {"uid-0": "acme", "uid-1": "acme", "uid-2": "platform", "uid-3": "stray"}


@pytest.fixture
def kamaji_server():
    with MetricsServer((DATA / "kamaji_metrics.txt").read_bytes()) as srv:
        yield srv.url


def test_kamaji_import_over_http(kamaji_server, tmp_path):
    imported = tenants.fetch_kamaji_tenants(kamaji_server)
    assert [(t.name, t.tcp_namespace, t.api_server, t.kubernetes_version) for t in imported] == [
        ("acme", "tenant-acme", "https://10.20.0.10:6443", "v1.30.2"),
        ("globex", "tenant-globex", "https://[2001:db8:7::10]:6443", "v1.31.0"),
        ("hooli", "tenant-hooli", "https://10.20.0.40:6443", "v1.30.2"),
        ("initech", "tenant-initech", None, "v1.29.6"),
    ]
    merged = tenants.merge(tenants.load_catalog(_write(tmp_path, CATALOG)), imported)
    assert [t.name for t in merged.tenants] == ["acme", "platform", "globex", "hooli", "initech"]
    acme = merged.tenants[0]
    assert (acme.display_name, acme.cost_center) == ("ACME Research", "CC-1001")  # the YAML wins
    # and keeps its api_server; Kamaji's endpoint becomes an alias of the same tenant
    assert acme.api_server == "https://acme.tenants.example:6443" and "https://10.20.0.10:6443" in acme.aliases
    con = store.connect(tmp_path / "k.duckdb")
    tenants.store_catalog(con, merged)
    # initech has no address: its cluster identity is "namespace/name"
    assert con.execute("SELECT tenant FROM cluster_tenant WHERE cluster = 'tenant-initech/initech'").fetchone() == ("initech",)


def test_kamaji_unreachable_is_a_config_error():
    with pytest.raises(ConfigError, match="--kamaji-metrics"):
        tenants.fetch_kamaji_tenants("http://127.0.0.1:9/metrics", timeout=2)
    with pytest.raises(ConfigError, match="--kamaji-metrics"):
        tenants.fetch_kamaji_tenants("file:///etc/passwd")
