"""The exporter as a drop-in for HAMi's vGPUmonitor (and, with `full`, the scheduler's per-device
families), checked against HAMi v2.10's own sources.

Fixtures are written from Project-HAMi/HAMi at tag v2.10.0, commit
4707fb02c91c545bc7343ce26dba4c32919f9a3e:
- cmd/vGPUmonitor/metrics.go: every descriptor (name, help, variable labels), the values each
  sends (memory sums, limit, SM percent, last kernel only when one ran), "NVIDIA-" + name;
- cmd/vGPUmonitor/main.go: the collector is registered under zone="vGPU", hami_build_info is not;
- cmd/vGPUmonitor/metrics_container_test.go: TestCollectContainerMetrics' numbers;
- cmd/scheduler/metrics.go: the per-device and per-container families, MiB -> bytes, cores in
  percent, hami_node_gpu_memory_allocated_ratio as Usedmem / Totalmem;
- pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go: the scheduler's device type is
  NVML's name, prefixed "NVIDIA-" only when it does not start with "NVIDIA";
- pkg/metrics/metrics.go: hami_build_info's help and labels.

The host temperature, power and ECC families are written from HAMi PR #2732's head, commit
f2d7232ac65c986762616f05d173bd0164d62e03, cmd/vGPUmonitor/metrics.go (descriptors,
collectGPUTemperatureMetrics, collectGPUPowerMetrics, collectGPUEccErrorMetrics) and the
numbers of its metrics_test.go (TestHostGPUMetricsCollectionSuccess, TestHostGPUMetricsUnsupported).
"""
from __future__ import annotations

import dataclasses
import subprocess

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats
from slicemeter.testkit.static_node import A100, A100_TOTAL, GiB, StaticNode, builder, gpu, pod, write_region
from slicemeter.testkit.hami_bytes import MiB, Proc
from slicemeter.simulator.nvml import ProcNow

NOW = 160                      # TestCollectContainerMetrics: nowSec 160, lastKernel 100 -> 60 s
UUID = "GPU-12345678-1234-1234-1234-123456789012"   # metrics_container_test.go's testUUID
UUID2 = "GPU-abcdef01-2345-6789-abcd-ef0123456789"
POD_UID = "0b7c6a52-3f41-4d8e-9a77-5e2f8c1d0a93"
POD2_UID = "5d2e9c10-7a6b-4f3e-8d21-9c0b1a2f3e4d"

CTR = ["namespace", "pod", "container", "vdevice_index", "device_uuid"]
HOST = ["node", "device_index", "device_uuid", "device_type"]
# cmd/vGPUmonitor/metrics.go @ 4707fb02: name -> (help, variable labels); zone is added by the wrapping registerer
MONITOR_DESCRIPTORS = {
    "hami_host_gpu_memory_used_bytes": ("GPU device memory usage in bytes", HOST),
    "hami_host_gpu_utilization_ratio": ("GPU core utilization ratio (0-100)", HOST),
    "hami_host_gpu_memory_controller_utilization_ratio": ("GPU memory controller utilization ratio (0-100)",
                                                          ["device_index", "device_uuid", "device_type"]),
    "hami_vgpu_memory_used_bytes": ("vGPU device memory usage in bytes", CTR),
    "hami_vgpu_memory_limit_bytes": ("vGPU device memory limit in bytes", CTR),
    "hami_container_device_memory_bytes": ("Container device memory usage in bytes", CTR),
    "hami_container_device_utilization_ratio": ("Container device SM utilization ratio", CTR),
    "hami_container_last_kernel_elapsed_seconds": ("Seconds since last kernel execution in container", CTR),
    "hami_mig_device_info": ("MIG runtime identity for a container allocation",
                             CTR + ["mig_uuid", "profile", "gpu_instance_id", "compute_instance_id"]),
    "hami_vgpu_memory_context_bytes": ("Container device memory context size in bytes", CTR),
    "hami_vgpu_memory_module_bytes": ("Container device memory module size in bytes", CTR),
    "hami_vgpu_memory_buffer_bytes": ("Container device memory buffer size in bytes", CTR),
}
# cmd/vGPUmonitor/metrics.go @ f2d7232a: the host families HAMi PR #2732 adds (same collector, so zone="vGPU")
HOST_HEALTH_DESCRIPTORS = {
    "hami_host_gpu_temperature_celsius": ("GPU temperature in degrees Celsius", "gauge", HOST),
    "hami_host_gpu_power_usage_watts": ("GPU power draw in watts", "gauge", HOST),
    "hami_host_gpu_ecc_errors_total": ("Lifetime aggregate ECC errors", "counter", HOST + ["error_type"]),
}
# pkg/metrics/metrics.go @ 4707fb02 (registered without the zone)
BUILD_INFO = ("hami_build_info", "hami build metadata exposed as labels with a constant value of 1.",
              ["build_date", "compiler", "go_version", "platform", "revision", "version"])
SCHED = ["node", "device_uuid", "device_index", "device_type"]
SCHED_CTR = ["namespace", "node", "pod", "container_index", "device_uuid"]
# cmd/scheduler/metrics.go @ 4707fb02, the families a node's grants determine
SCHEDULER_DESCRIPTORS = {
    "hami_gpu_memory_limit_bytes": ("Device memory limit for a certain GPU", SCHED),
    "hami_gpu_core_limit_ratio": ("Device core limit for a certain GPU", SCHED),
    "hami_gpu_memory_allocated_bytes": ("Device memory allocated for a certain GPU",
                                        ["node", "device_uuid", "device_index", "device_cores", "device_type"]),
    "hami_gpu_shared_count": ("Number of containers sharing this GPU", SCHED),
    "hami_gpu_core_allocated_ratio": ("Device core allocated for a certain GPU", SCHED),
    "hami_node_gpu_overview": ("GPU overview on a certain node",
                               ["node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type"]),
    "hami_node_gpu_memory_allocated_ratio": ("GPU Memory Allocated Percentage on a certain GPU", SCHED),
    "hami_vgpu_memory_allocated_bytes": ("vGPU memory allocated from a container", SCHED_CTR),
    "hami_vgpu_core_allocated_ratio": ("vGPU core allocated from a container", SCHED_CTR),
}


def _node(tmp_path, last_kernel=100, sm_util=42, power_mw=250_000):
    """TestCollectContainerMetrics' container (team-a/trainer-0/worker on testUUID) in a real v1 region,
    a second pod granted on the second GPU that has not touched CUDA yet."""
    first = dataclasses.replace(gpu(UUID, sm=37, mem_util=21), power_mw=power_mw)
    node = StaticNode(gpus=[first, gpu(UUID2, sm=5, mem_util=3)], ts_ms=NOW * 1000,
                      procs={0: [ProcNow(pid=4242, used_bytes=1800, sm_pct=sm_util, mem_util_pct=10)]})
    hami = tmp_path / "hami"
    write_region(hami, POD_UID, "worker", devices=[(UUID, 10000, 30)],
                 procs=[Proc(pid=7, hostpid=4242, mem=[(1000, 500, 300)], sm_util=[sm_util])],
                 last_kernel_time=last_kernel)
    pods = [pod(POD_UID, "trainer-0", "team-a", ["worker"], f"{UUID},NVIDIA,10240,30:;"),
            pod(POD2_UID, "infer-0", "team-b", ["init-less", "server"], f";{UUID2},NVIDIA,20480,25:;")]
    return builder(node, hami, pods).build(NOW * 1000)


def _stats(result) -> ExporterStats:
    stats = ExporterStats(tenant="acme", version="1.2.3")
    stats.record(result)
    return stats


def _text(result, mode: str) -> str:
    return ExporterCollector(_stats(result), mode).exposition().decode()


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _samples(text: str, name: str) -> list[tuple[dict, float]]:
    return [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def test_monitor_emits_exactly_vgpumonitors_families(tmp_path):
    text = _text(_node(tmp_path), "monitor")
    fams = {n: f for n, f in _families(text).items() if n.startswith("hami_")}
    # the parser names a counter family without its _total
    assert set(fams) == (set(MONITOR_DESCRIPTORS) | {BUILD_INFO[0]}
                         | {n.removesuffix("_total") for n in HOST_HEALTH_DESCRIPTORS})
    for name, (doc, labels) in MONITOR_DESCRIPTORS.items():
        assert fams[name].documentation == doc and fams[name].type == "gauge", name
        assert f"# HELP {name} {doc}\n# TYPE {name} gauge\n" in text
        for s in fams[name].samples:
            assert list(s.labels) == sorted(labels + ["zone"]), (name, s.labels)   # Go's client sorts them
            assert s.labels["zone"] == "vGPU"
    (build,) = fams[BUILD_INFO[0]].samples
    assert fams[BUILD_INFO[0]].documentation == BUILD_INFO[1]
    assert list(build.labels) == BUILD_INFO[2] and build.labels["version"] == "1.2.3" and build.value == 1


def test_container_values_are_what_vgpumonitor_sends(tmp_path):
    text = _text(_node(tmp_path), "monitor")
    labels = {"namespace": "team-a", "pod": "trainer-0", "container": "worker", "vdevice_index": "0",
              "device_uuid": UUID, "zone": "vGPU"}
    want = {  # TestCollectContainerMetrics, with the region's total = context + module + buffer as HAMi-core keeps it
        "hami_vgpu_memory_used_bytes": 1800, "hami_vgpu_memory_limit_bytes": 10000,
        "hami_container_device_memory_bytes": 1800, "hami_container_device_utilization_ratio": 42,
        "hami_vgpu_memory_context_bytes": 1000, "hami_vgpu_memory_module_bytes": 500,
        "hami_vgpu_memory_buffer_bytes": 300, "hami_container_last_kernel_elapsed_seconds": 60,
    }
    for name, value in want.items():
        assert _samples(text, name) == [(labels, value)], name   # the granted-only pod has no region: no series
    # slicemeter's own families keep 0..1
    (sm,) = [v for l, v in _samples(text, "slicemeter_slice_sm_utilization_ratio") if l["pod"] == "trainer-0"]
    assert sm == pytest.approx(0.42)


def test_no_last_kernel_series_before_a_kernel_ran(tmp_path):
    """TestCollectContainerMetricsNoKernelActivity: seven families, no last-kernel one."""
    text = _text(_node(tmp_path, last_kernel=0), "monitor")
    per_container = [n for n, (_, labels) in MONITOR_DESCRIPTORS.items() if labels == CTR and _samples(text, n)]
    assert len(per_container) == 7 and "hami_container_last_kernel_elapsed_seconds" not in per_container


def test_host_families_hold_percent_and_the_monitors_device_type(tmp_path):
    text = _text(_node(tmp_path), "monitor")
    host = {"node": "gpu-node-1", "device_index": "0", "device_uuid": UUID, "device_type": "NVIDIA-" + A100, "zone": "vGPU"}
    assert (host, 37) in _samples(text, "hami_host_gpu_utilization_ratio")
    assert (host, 10 * GiB) in _samples(text, "hami_host_gpu_memory_used_bytes")
    no_node = {k: v for k, v in host.items() if k != "node"}
    assert (no_node, 21) in _samples(text, "hami_host_gpu_memory_controller_utilization_ratio")
    assert {l["gpu_uuid"]: v for l, v in _samples(text, "slicemeter_gpu_sm_utilization_ratio")}[UUID] == pytest.approx(0.37)


def _health_node(tmp_path, **reading):
    """The node with GPU 0 reading as TestHostGPUMetricsCollectionSuccess' mock device answers:
    power 150,000 mW through the fake NVML; temperature and ECC counts set on the reading."""
    result = _node(tmp_path, power_mw=150_000)
    health = ("temperature_celsius", "ecc_corrected_aggregate", "ecc_uncorrected_aggregate",
              "ecc_corrected_volatile", "ecc_uncorrected_volatile")
    for g in result.tick.gpus:           # only what the test sets is read; other GPUs lack the sensors
        for k in health:
            setattr(g, k, None)
    g = next(g for g in result.tick.gpus if g.gpu_uuid == UUID)
    for k, v in reading.items():
        setattr(g, k, v)
    return result


def _host_series(text: str, name: str) -> dict[str, tuple[dict, float]]:
    return {l["device_uuid"] + l.get("error_type", ""): (l, v) for l, v in _samples(text, name)}


HOST_LABELS = {"node": "gpu-node-1", "device_index": "0", "device_uuid": UUID, "device_type": "NVIDIA-" + A100,
               "zone": "vGPU"}


def _check_descriptor(text: str, name: str) -> None:
    doc, kind, labels = HOST_HEALTH_DESCRIPTORS[name]
    assert f"# HELP {name} {doc}\n# TYPE {name} {kind}\n" in text
    for labels_of, _ in _samples(text, name):
        assert list(labels_of) == sorted(labels + ["zone"]), (name, labels_of)


def test_host_gpu_temperature_celsius_is_what_the_monitor_sends(tmp_path):
    text = _text(_health_node(tmp_path, temperature_celsius=45.0), "monitor")
    _check_descriptor(text, "hami_host_gpu_temperature_celsius")
    # GetTemperature(TEMPERATURE_GPU) = 45 -> 45 degrees; the second GPU's sensor not read: no series
    assert _host_series(text, "hami_host_gpu_temperature_celsius") == {UUID: (HOST_LABELS, 45)}


def test_host_gpu_power_usage_watts_is_nvmls_milliwatts_over_1000(tmp_path):
    text = _text(_health_node(tmp_path), "monitor")
    _check_descriptor(text, "hami_host_gpu_power_usage_watts")
    series = _host_series(text, "hami_host_gpu_power_usage_watts")
    assert series[UUID] == (HOST_LABELS, 150.0)   # GetPowerUsage 150000 mW -> 150 W
    assert series[UUID2][1] == 250.0 and len(series) == 2
    without = _node(tmp_path, power_mw=150_000)
    for g in without.tick.gpus:
        g.power_watts = None   # ERROR_NOT_SUPPORTED: skipped, no series
    assert not _samples(_text(without, "monitor"), "hami_host_gpu_power_usage_watts")


def test_host_gpu_ecc_errors_total_counts_aggregate_corrected_and_uncorrected(tmp_path):
    text = _text(_health_node(tmp_path, ecc_corrected_aggregate=5, ecc_uncorrected_aggregate=2,
                              ecc_corrected_volatile=1, ecc_uncorrected_volatile=1), "monitor")
    _check_descriptor(text, "hami_host_gpu_ecc_errors_total")
    # GetTotalEccErrors(MEMORY_ERROR_TYPE_{CORRECTED,UNCORRECTED}, AGGREGATE_ECC), one series each, a counter
    assert _host_series(text, "hami_host_gpu_ecc_errors_total") == {
        UUID + "corrected": (HOST_LABELS | {"error_type": "corrected"}, 5),
        UUID + "uncorrected": (HOST_LABELS | {"error_type": "uncorrected"}, 2)}
    one = _text(_health_node(tmp_path, ecc_corrected_aggregate=7), "monitor")   # the other type not supported
    assert [l["error_type"] for l, _ in _samples(one, "hami_host_gpu_ecc_errors_total")] == ["corrected"]


def test_full_adds_the_schedulers_families_from_the_nodes_grants(tmp_path):
    text = _text(_node(tmp_path), "full")
    fams = _families(text)
    for name, (doc, labels) in SCHEDULER_DESCRIPTORS.items():
        assert fams[name].documentation == doc, name
        assert fams[name].samples, name
        for s in fams[name].samples:
            assert set(s.labels) == set(labels) | {"zone"} and s.labels["zone"] == "vGPU", (name, s.labels)
    dev = {"node": "gpu-node-1", "device_uuid": UUID, "device_index": "0", "device_type": A100, "zone": "vGPU"}
    dev2 = dev | {"device_uuid": UUID2, "device_index": "1"}

    def value(name, labels):
        return dict((tuple(sorted(l.items())), v) for l, v in _samples(text, name))[tuple(sorted(labels.items()))]

    assert value("hami_gpu_memory_limit_bytes", dev) == A100_TOTAL
    assert value("hami_gpu_core_limit_ratio", dev) == 100
    assert value("hami_gpu_memory_allocated_bytes", dev | {"device_cores": "100"}) == 10240 * MiB
    assert value("hami_gpu_shared_count", dev) == 1 and value("hami_gpu_shared_count", dev2) == 1
    assert value("hami_gpu_core_allocated_ratio", dev) == 30 and value("hami_gpu_core_allocated_ratio", dev2) == 25
    assert value("hami_node_gpu_memory_allocated_ratio", dev2) == pytest.approx(20480 / 81920)   # 0..1 upstream
    assert value("hami_node_gpu_overview", dev | {"device_cores": "100", "device_memory_limit": "81920"}) == 10240 * MiB
    ctr = {"namespace": "team-b", "node": "gpu-node-1", "pod": "infer-0", "container_index": "1", "device_uuid": UUID2,
           "zone": "vGPU"}
    assert value("hami_vgpu_memory_allocated_bytes", ctr) == 20480 * MiB
    assert value("hami_vgpu_core_allocated_ratio", ctr) == 25


def test_off_emits_no_hami_family_and_slicemeters_are_the_same_in_every_mode(tmp_path):
    res = _node(tmp_path)
    texts = {mode: _text(res, mode) for mode in ("monitor", "full", "off")}
    assert not [n for n in _families(texts["off"]) if n.startswith("hami_")]
    assert not set(SCHEDULER_DESCRIPTORS) & set(_families(texts["monitor"]))
    own = {mode: sorted((s.name, tuple(sorted(s.labels.items())), s.value)
                        for f in text_string_to_metric_families(t) for s in f.samples if s.name.startswith("slicemeter_")
                        and s.name != "slicemeter_scrape_duration_seconds") for mode, t in texts.items()}
    assert own["monitor"] == own["full"] == own["off"] and len(own["off"]) > 20


@pytest.mark.parametrize("mode", ["monitor", "full", "off"])
def test_promtool_check_metrics_is_clean(tmp_path, mode):
    check = subprocess.run(["promtool", "check", "metrics"], input=_text(_node(tmp_path), mode),
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check.stdout + check.stderr


@pytest.mark.parametrize("mode", ["monitor", "full", "off"])
def test_describe_lists_every_family_collect_emits(tmp_path, mode):
    collector = ExporterCollector(_stats(_node(tmp_path)), mode)
    described = collector.describe()
    assert described and all(not m.samples for m in described)
    assert [m.name for m in described] == [m.name for m in collector.collect()]
    registry = CollectorRegistry()           # auto-describe: names are checked for collisions at registration
    registry.register(collector)
    assert registry.get_sample_value("slicemeter_gpu_slices", {"node": "gpu-node-1", "cluster": "https://acme.example:6443",
                                                                "tenant": "acme", "gpu_uuid": UUID, "gpu_index": "0",
                                                                "model": A100}) == 1


def test_an_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="monitor, full, off"):
        ExporterCollector(ExporterStats(tenant="acme"), "scheduler")


# --- the CLI: modes and Prometheus-only ------------------------------------------------------

def _exporter_args(tmp_path, *extra):
    import argparse

    from slicemeter.exporter.cli import configure

    scenario = tmp_path / "s.yaml"
    scenario.write_text(SIM_SCENARIO)
    parser = argparse.ArgumentParser(prog="slicemeter exporter")
    configure(parser)
    return parser.parse_args(["--simulate", str(scenario), "--node", "n1", "--hami-dir",
                              str(tmp_path / "hami"), "--spool-dir", str(tmp_path / "spool"), *extra])


SIM_SCENARIO = """
tenants:
  - {name: acme, display_name: ACME, kamaji: {namespace: t, name: acme}, api_server: 'https://a.example:6443', cost_center: C}
nodes:
  - name: n1
    tenant: acme
    gpus: [{model: "NVIDIA L4", count: 1}]
    pods:
      - name: p
        namespace: ns
        containers:
          - {name: c, resources: {nvidia.com/gpumem: 4096, nvidia.com/gpucores: 20}, workload: steady-training}
"""


@pytest.mark.parametrize("kafka", [[], ["--kafka", ""]])
def test_without_kafka_the_exporter_serves_metrics_and_publishes_nothing(tmp_path, kafka):
    from slicemeter.exporter.cli import build_exporter

    exporter, stats = build_exporter(_exporter_args(tmp_path, *kafka))
    assert exporter.publisher is None and stats.spool_stats is None
    exporter.tick_once()
    assert not (tmp_path / "spool").exists()
    assert "slicemeter_published_ticks_total 0\n" in ExporterCollector(stats).exposition().decode()


def test_an_exporter_with_neither_kafka_nor_metrics_is_refused(tmp_path):
    from slicemeter.exporter.cli import build_exporter
    from slicemeter.common import ConfigError

    with pytest.raises(ConfigError, match="--kafka HOST:PORT, a /metrics --port"):
        build_exporter(_exporter_args(tmp_path, "--port", "0"))


def test_hami_metrics_option_takes_the_three_modes(tmp_path):
    assert _exporter_args(tmp_path).hami_metrics == "monitor"
    assert _exporter_args(tmp_path, "--hami-metrics", "full").hami_metrics == "full"
    with pytest.raises(SystemExit):
        _exporter_args(tmp_path, "--hami-metrics", "scheduler")
