"""Scenario loading: the examples load, and mistakes name the key path and the YAML line."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from slicemeter.simulator.scenario import ScenarioError, load_scenario, parse_scenario

REPO = Path(__file__).resolve().parent.parent

HEAD = """\
tenants:
  - name: acme
    api_server: https://acme.example:6443
    kamaji: {namespace: tenant-acme, name: acme}
nodes:
  - name: n1
    tenant: acme
"""


def _err(text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(text, "s.yaml")
    return exc.value


def test_demo_scenario_covers_the_issue():
    s = load_scenario(REPO / "examples/demo.yaml")
    assert len(s.tenants) >= 3 and len(s.nodes) >= 4
    gpus = [g for n in s.nodes for g in n.gpus]
    assert len(gpus) >= 8 and len({g.model for g in gpus}) >= 2
    containers = [c for n in s.nodes for p in n.pods for c in p.containers if c.has_gpu]
    assert {c.workload.pattern for c in containers} == {
        "steady-training", "diurnal-inference", "bursty-notebook", "idle-reservation", "batch-jobs"}
    assert any(len(c.devices) > 1 for c in containers), "a multi-GPU container"
    assert any(c.whole_gpu for c in containers), "a whole-GPU pod"
    assert any(len(p.containers) > 1 for n in s.nodes for p in n.pods), "a multi-container pod"
    assert {n.layout for n in s.nodes} == {"v0", "v1"}
    assert {n.hami_core for n in s.nodes} >= {"v0", "1.1", "1.2"} and {n.hami_version for n in s.nodes} == {"2.8", "2.10"}
    assert any(c.has_gpu and c.cores == 0 and not c.whole_gpu for c in containers), "a memory-only slice"
    assert any(c.has_gpu for n in s.nodes for p in n.pods for c in p.init_containers), "a GPU init container"
    assert any(n.watcher_zeroed > 0 for n in s.nodes)
    assert {n.cluster for n in s.nodes} == {t.api_server for t in s.tenants}
    # HAMi's grant never exceeds a GPU
    for n in s.nodes:
        for g in n.gpus:
            assert sum(m for p in n.pods for c in p.containers for d, m in zip(c.devices, c.mem_mib)
                       if d == g.index) <= g.memory_mib


def test_large_scenario_size():
    s = load_scenario(REPO / "examples/large.yaml")
    assert len(s.nodes) >= 1000 and all(len(n.gpus) == 8 for n in s.nodes)
    assert len({n.name for n in s.nodes}) == len(s.nodes)
    uids = [p.uid for n in s.nodes for p in n.pods]
    assert len(set(uids)) == len(uids)


def test_bad_yaml_names_the_line():
    e = _err(HEAD + "    gpus: [{model: 'NVIDIA L4'\n    pods: []\n")
    assert "not valid YAML" in str(e) and e.line in (9, 10) and str(e).startswith(f"s.yaml:{e.line}: ")


def test_unknown_gpu_model_names_key_and_line():
    e = _err(HEAD + "    gpus:\n      - {model: NVIDIA L4}\n      - {model: NVIDIA Z9000}\n")
    assert e.path == "nodes[0].gpus[1].model" and e.line == 10
    assert "unknown GPU model 'NVIDIA Z9000'" in str(e) and str(e).startswith("s.yaml:10: nodes[0].gpus[1].model: ")


def test_slices_over_gpu_memory_name_the_container_and_line():
    text = HEAD + """\
    gpus: [{model: NVIDIA L4}]
    pods:
      - name: a
        containers:
          - name: c
            resources: {nvidia.com/gpumem: 16000}
            workload: steady-training
      - name: b
        containers:
          - name: c
            resources: {nvidia.com/gpumem: 8000}
            workload: steady-training
"""
    e = _err(text)
    assert e.path == "nodes[0].pods[1].containers[0].resources" and e.line == 18
    assert "more memory than a GPU has" in str(e)
    # pinned to a device: the message names the GPU and both figures
    e = _err(text.replace("{nvidia.com/gpumem: 8000}\n", "{nvidia.com/gpumem: 8000}\n            devices: [0]\n"))
    assert "ask for 24000 MiB, the GPU has 23034 MiB" in str(e) and e.line == 18


POD = "    gpus: [{model: NVIDIA L4}]\n    pods:\n      - name: a\n        containers:\n          - name: c\n"


@pytest.mark.parametrize("tail,path,line,needle", [
    (POD + "            resources: {nvidia.com/gpumem: 100}\n            workload: crypto-mining\n",
     "nodes[0].pods[0].containers[0].workload.pattern", 14, "unknown workload pattern 'crypto-mining'"),
    (POD + "            resources: {nvidia.com/gpumem: 100}\n            workload: {pattern: steady-training, peak: 0.5}\n",
     "nodes[0].pods[0].containers[0].workload.peak", 14, "unknown key for steady-training (allowed: pattern, level, memory)"),
    (POD + "            resources: {nvidia.com/gpumem: 100}\n            workload: {pattern: batch-jobs, jobs_per_day: 0}\n",
     "nodes[0].pods[0].containers[0].workload.jobs_per_day", 14, "0 must be >= 1"),
    (POD + "            resources: {nvidia.com/gpumem: 100, nvidia.com/gpumem-percentage: 5}\n            workload: batch-jobs\n",
     'nodes[0].pods[0].containers[0].resources."nvidia.com/gpumem-percentage"', 13, "not both"),
    (POD + "            resources: {nvidia.com/gpucores: 101}\n            workload: batch-jobs\n",
     'nodes[0].pods[0].containers[0].resources."nvidia.com/gpucores"', 13, "101 must be <= 100"),
    (POD + "            processes: 65\n", "nodes[0].pods[0].containers[0].processes", 13, "65 must be <= 64"),
    (POD + "            resources: {nvidia.com/gpu: 1}\n",
     "nodes[0].pods[0].containers[0].workload", 12, "a GPU container needs a workload pattern"),
    ("    gpus: [{model: NVIDIA L4}]\n    pods:\n      - name: a\n        containers: []\n",
     "nodes[0].pods[0].containers", 11, "must not be empty"),
    ("    pods: []\n", "nodes[0].gpus", 6, "missing required key"),
    ("    gpus: [{model: NVIDIA L4}]\n    pods:\n      - name: a..b\n        containers: [{name: c}]\n",
     "nodes[0].pods[0].name", 10, "'a..b' is not a valid Kubernetes name"),
    ("    gpus: [{model: NVIDIA L4}]\n    pods:\n      - name: a\n        namespace: " + "n" * 64 + "\n"
     "        containers: [{name: c}]\n", "nodes[0].pods[0].namespace", 11, "is not a valid Kubernetes namespace"),
    ("    gpus: [{model: NVIDIA L4}]\n    hami_layout: v7\n", "nodes[0].hami_layout", 9, "unknown HAMi layout 'v7'"),
    ("    gpus: [{model: NVIDIA L4}]\n    colour: red\n", "nodes[0].colour", 9, "unknown key (allowed: count, faults, gpus,"),
    ("    gpus: [{model: NVIDIA L4, count: 17}]\n", "nodes[0].gpus", 8, "17 GPUs: HAMi's region holds at most 16"),
    ("    gpus: [{model: NVIDIA L4}]\n    nvml_unsupported: [nvmlInit, power]\n", "nodes[0].nvml_unsupported[1]", 9,
     "'power' is not an NVML function name"),
    ("    gpus: [{model: NVIDIA L4}]\n    joins: {days_before_now: -1}\n", "nodes[0].joins.days_before_now", 9,
     "expected an integer >= 0, got -1"),
])
def test_other_errors_name_the_key_and_line(tail, path, line, needle):
    e = _err(HEAD + tail)
    assert (e.path, e.line) == (path, line) and needle in str(e), str(e)
    assert str(e).startswith(f"s.yaml:{line}: {path}: ")


def test_unknown_tenant_and_count_expansion():
    e = _err(HEAD.replace("tenant: acme", "tenant: nobody") + "    gpus: [{model: NVIDIA L4}]\n")
    assert e.path == "nodes[0].tenant" and e.line == 7
    s = parse_scenario(HEAD.replace("  - name: n1\n", "  - name: n1\n    count: 3\n") +
                       "    gpus: [{model: Tesla T4, count: 2}]\n    pods:\n      - name: p\n        containers:\n"
                       "          - {name: c, resources: {nvidia.com/gpumem-percentage: 50}, workload: idle-reservation}\n")
    assert [n.name for n in s.nodes] == ["n1-0001", "n1-0002", "n1-0003"]
    assert [n.pods[0].name for n in s.nodes] == ["p-0001", "p-0002", "p-0003"]
    assert s.nodes[0].pods[0].containers[0].mem_mib == (7680,)
    assert len({n.gpus[0].uuid for n in s.nodes}) == 3


def test_simulate_cli_stops_on_a_bad_scenario_naming_the_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(HEAD + "    gpus: [{model: NVIDIA L4, count: 0}]\n")
    res = subprocess.run([str(Path(sys.executable).parent / "slicemeter"), "simulate", "--scenario", str(bad),
                          "--hami-dir", str(tmp_path / "h")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "configuration error" in res.stderr and "bad.yaml:8: nodes[0].gpus[0].count: 0 must be >= 1" in res.stderr
    assert not (tmp_path / "h").exists()
