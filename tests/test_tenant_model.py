"""One tenant model: a scenario and the tenant catalog refuse the same bad tenant with the
same message, key and line (a scenario file is also ingest's --tenants catalog)."""
from __future__ import annotations

import pytest

from slicemeter.common import ConfigError
from slicemeter.ingest import tenants
from slicemeter.simulator.scenario import parse_scenario

SCENARIO = """\
tenants:
  - name: acme
    api_server: https://acme.example:6443
    kamaji: {namespace: tenant-acme, name: acme}
    aliases: ["https://10.0.0.7:6443"]
    namespace_overrides: [{namespace: shared, tenant: globex}]
  - name: globex
    api_server: https://globex.example:6443
    cost_center: CC-7
nodes:
  - name: n1
    tenant: acme
    gpus: [{model: NVIDIA L4}]
"""


@pytest.mark.parametrize("old, new, where", [
    ("name: acme\n", "name: Acme\n", "2: tenants[0].name: 'Acme' is not a lowercase DNS label"),
    ("name: acme\n", "name: acme-\n", "2: tenants[0].name: 'acme-' is not a lowercase DNS label"),
    ("https://acme.example:6443", "acme.example", "3: tenants[0].api_server: 'acme.example' is not an https://host:port URL"),
    ("{namespace: tenant-acme, name: acme}", "{namespace: tenant-acme}", "4: tenants[0].kamaji.name: missing required key"),
    ("name: acme}", "name: acme, zone: eu}", "4: tenants[0].kamaji.zone: unknown key (allowed: name, namespace)"),
    ('["https://10.0.0.7:6443"]', '[""]', "5: tenants[0].aliases[0]: must not be empty"),
    ('["https://10.0.0.7:6443"]', "[7]", "5: tenants[0].aliases[0]: expected a string, got int 7"),
    ("tenant: globex}", "tenant: hooli}", "6: tenants[0].namespace_overrides[0].tenant: unknown tenant 'hooli'"),
    ("{namespace: shared, tenant: globex}", "{tenant: globex}", "6: tenants[0].namespace_overrides[0].namespace: missing"),
    ("name: globex\n", "name: acme\n", "7: tenants[1].name: tenant 'acme' defined twice"),
    ("cost_center: CC-7", "cost_center: 7", "9: tenants[1].cost_center: expected a string, got int 7"),
    ("cost_center: CC-7", "colour: red", "9: tenants[1].colour: unknown key"),
])
def test_the_same_bad_tenant_is_refused_alike_by_scenario_and_catalog(tmp_path, old, new, where):
    text = SCENARIO.replace(old, new, 1)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as in_scenario:
        parse_scenario(text, str(path))
    with pytest.raises(ConfigError) as in_catalog:
        tenants.load_catalog(path)
    assert str(in_scenario.value) == str(in_catalog.value)
    assert str(in_catalog.value).startswith(f"{path}:{where}"), str(in_catalog.value)


def test_a_scenario_also_needs_the_cluster_its_nodes_report(tmp_path):
    # the catalog matches a Kamaji-only tenant by its TenantControlPlane; a simulated node
    # must name its cluster, so a scenario's tenant needs api_server
    text = SCENARIO.replace("    api_server: https://acme.example:6443\n", "", 1)
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert tenants.load_catalog(path).tenants[0].cluster == "tenant-acme/acme"
    with pytest.raises(ConfigError, match=rf"^{path}:2: tenants\[0\]\.api_server: missing required key"):
        parse_scenario(text, str(path))
