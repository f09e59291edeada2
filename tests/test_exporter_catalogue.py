"""exporter/serve/catalogue.py is the one declaration of the exporter's families: the served
/metrics, the collectors' describe(), docs/metrics.md and the Grafana builder all agree with it."""
from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from slicemeter.exporter.serve import catalogue
from slicemeter.exporter.serve.catalogue import CATALOGUE, GROUPS, group, render_docs
from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats, GpuCollector, HealthCollector
from slicemeter.exporter.sources.nvml import NvmlReader
from slicemeter.exporter.sources.pods import PodCache
from slicemeter.exporter.assemble.tick_builder import TickBuilder
from slicemeter.simulator.node import SimulatedNode
from slicemeter.simulator.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
T0 = 1_795_000_000_000
MODE_GROUPS = {"monitor": {"gpu", "gpu_health", "slice", "hami_monitor", "health"},
               "full": {"gpu", "gpu_health", "slice", "hami_monitor", "hami_scheduler", "health"},
               "off": {"gpu", "gpu_health", "slice", "health"}}


@pytest.fixture(scope="module")
def stats(tmp_path_factory):
    """The demo scenario's first node after two ticks, with a spool."""
    scenario = load_scenario(str(REPO / "examples" / "demo.yaml"))
    node = scenario.nodes[0].name
    hami = tmp_path_factory.mktemp("hami")
    sim = SimulatedNode(scenario, node, hami)
    sim.nvml.nvmlInit()
    pods = PodCache(sim.pods)
    builder = TickBuilder(node, sim.cluster, NvmlReader(sim.nvml, initialised=True), str(hami), pods, proc_root=None)
    st = ExporterStats(tenant="acme", version="1.0")
    for ts in (T0, T0 + 10_000):
        sim.advance(ts)
        pods.refresh()
        st.record(builder.build(ts))
    st.spool_stats = lambda: {"ticks": 1, "bytes": 10, "dropped": 0, "refused": 0, "published": 3}
    return st


@pytest.mark.parametrize("mode", sorted(MODE_GROUPS))
def test_served_metrics_are_the_catalogues_families(stats, mode):
    served = {f.name: f for f in text_string_to_metric_families(ExporterCollector(stats, mode).exposition().decode())}
    expected = [f for f in CATALOGUE.values() if f.group in MODE_GROUPS[mode]]
    assert list(served) == [f.name for f in expected]   # every family, in the table's order, nothing else
    with_samples = 0
    for f in expected:
        got = served[f.name]
        assert (got.type, got.documentation) == ({"untyped": "unknown"}.get(f.type, f.type), f.help), f.name
        for s in got.samples:
            assert s.name == f.sample_name and tuple(sorted(s.labels)) == tuple(sorted(f.labels)), (f.name, s)
        with_samples += bool(got.samples)
    assert with_samples >= len(expected) * 2 // 3   # the check saw real series, not only headers


def test_each_collector_describes_its_group_and_the_registry_refuses_a_second_copy(stats):
    for cls, name in ((GpuCollector, "gpu"), (HealthCollector, "health")):
        assert [m.name for m in cls(stats).describe()] == [f.name for f in group(name)]
    registry = CollectorRegistry()
    registry.register(ExporterCollector(stats, "full"))
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        registry.register(GpuCollector(stats))


def test_docs_metrics_md_tables_are_generated_from_the_catalogue():
    path = REPO / "docs" / "metrics.md"
    text = path.read_text()
    assert text == render_docs(text), "stale: python -m slicemeter.exporter.serve.catalogue docs/metrics.md"
    assert {f"<!-- catalogue:{g} -->" for g in GROUPS} <= set(text.splitlines())
    for f in CATALOGUE.values():
        assert f"| `{f.sample_name}` | {f.type} |" in text


def test_a_changed_catalogue_row_shows_in_the_generated_docs(monkeypatch):
    text = "<!-- catalogue:health -->\nSTALE ROW\n<!-- /catalogue -->\n"
    before = render_docs(text)
    renamed = catalogue.Family("slicemeter_spool_ticks", "gauge", "Ticks in the spool, renamed", (), "health")
    rows = [renamed if f.name == renamed.name else f for f in catalogue._ROWS]
    monkeypatch.setattr(catalogue, "_ROWS", rows)
    after = render_docs(text)
    assert "STALE ROW" not in before and "Ticks in the spool, renamed" in after and after != before
    with pytest.raises(ValueError, match="group 'nope'"):
        render_docs("<!-- catalogue:nope -->\n<!-- /catalogue -->")


def test_grafana_builder_refuses_families_and_labels_the_catalogue_lacks():
    check = runpy.run_path(str(REPO / "grafana" / "build_dashboards.py"))["check_against_catalogue"]
    check([{"expr": 'sum by (node) (slicemeter_gpu_power_watts{tenant=~"$tenant"})'}])
    with pytest.raises(ValueError, match="slicemeter_gpu_powr_watts"):
        check([{"expr": "slicemeter_gpu_powr_watts"}])
    with pytest.raises(ValueError, match="namespace"):
        check([{"expr": 'slicemeter_gpu_power_watts{namespace=~"$namespace"}'}])
