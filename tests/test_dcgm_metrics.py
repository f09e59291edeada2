"""`--dcgm-metrics`: dcgm-exporter's device fields from the Tick, as dcgm-exporter names,
types, units and labels them.

Written from NVIDIA/dcgm-exporter at commit d5e5f510a1b6b393f39a43293ccd9dc985defc79:
- etc/default-counters.csv: each field's Prometheus type and help text (FB in MiB, power W,
  temperatures C, utilization %);
- internal/pkg/rendermetrics/render_metrics.go (gpuMetricsFormat): the labels gpu, UUID,
  pci_bus_id, device, modelName, hostname (renamed from Hostname in that commit), then the
  label fields (DCGM_FI_DRIVER_VERSION) and attributes;
- internal/pkg/collector/gpu_collector.go (toMetric): `UUID` unless the old namespace is asked
  for, device = "nvidia" + index, XID_ERRORS' err_code attribute, blank values skipped;
- internal/pkg/transformation/kubernetes.go, const.go: pod, namespace, container of the pod
  holding a device.
DCGM_FI_DEV_FAN_SPEED is in none of its CSV files: its unit is DCGM's field description in
NVIDIA/go-dcgm pkg/dcgm/dcgm_fields.h at ec245c09fe3e26c559b0021a6884dd1ce2ebb4ca (the version
d5e5f51's go.mod pins): "Fan speed for the device in percent 0-100".
"""
from __future__ import annotations

import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slicemeter.exporter.serve.catalogue import CATALOGUE
from slicemeter.exporter.serve.collector import ExporterCollector, ExporterStats
from slicemeter.simulator.nvml import DRIVER_VERSION
from slicemeter.testkit.static_node import A100, A100_TOTAL, GiB, StaticNode, builder, gpu, pod
from slicemeter.common import MiB

# etc/default-counters.csv @ d5e5f51 (and dcgm_fields.h for the fan): field -> (type, help)
COUNTERS = {
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_MEMORY_TEMP": ("gauge", "Memory temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_FAN_SPEED": ("gauge", "Fan speed for the device in percent 0-100"),
}
# gpuMetricsFormat's labels but pci_bus_id (the Tick does not carry it), the driver label field,
# and the Kubernetes attributes
GPU_LABELS = {"gpu", "UUID", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION"}
POD_LABELS = {"pod", "namespace", "container"}
UUIDS = ["GPU-0a1b2c3d-0000-4000-8000-000000000000", "GPU-0a1b2c3d-0000-4000-8000-000000000001",
         "GPU-0a1b2c3d-0000-4000-8000-000000000002"]
NODE = "gpu-node-1"
USED = 10 * GiB + 3 * MiB + 123   # not whole MiB: DCGM's integer MiB round down


def _result(tmp_path):
    """GPU 0 shared by two containers, GPU 1 held by one, GPU 2 idle (grants, no regions)."""
    node = StaticNode(gpus=[gpu(UUIDS[0], used=USED, sm=37, mem_util=21), gpu(UUIDS[1], sm=5, mem_util=3),
                            gpu(UUIDS[2], sm=0, mem_util=0)])
    pods = [pod("11111111-1111-4111-8111-111111111111", "trainer", "ml", ["main"], f"{UUIDS[0]},NVIDIA,10240,30:;"),
            pod("22222222-2222-4222-8222-222222222222", "chat", "serving", ["server"], f"{UUIDS[0]},NVIDIA,8192,20:;"),
            pod("33333333-3333-4333-8333-333333333333", "vision", "ml", ["trainer"], f"{UUIDS[1]},NVIDIA,81920,100:;")]
    return builder(node, tmp_path / "hami", pods, name=NODE).build(1_795_000_000_000)


def _with_health(result):
    g = result.tick.gpus[0]
    g.temperature_celsius, g.memory_temperature_celsius, g.fan_speed_ratio = 45.4, 60.6, 0.3
    return result


def _exposition(*results, dcgm: bool = True) -> str:
    stats = ExporterStats(tenant="acme", version="1.0")
    collector = ExporterCollector(stats, "monitor", dcgm)
    text = ""
    for r in results:
        stats.record(r)
        text = collector.exposition().decode()
    return text


def _series(text: str, name: str) -> dict[str, tuple[dict, float]]:
    return {s.labels["UUID"]: (s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == name}


def test_off_by_default_and_on_serves_dcgm_exporters_names_types_and_help(tmp_path):
    res = _with_health(_result(tmp_path))
    assert "DCGM_FI_" not in _exposition(res, dcgm=False)
    text = _exposition(res)
    served = {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("DCGM_")}
    assert list(served) == list(COUNTERS)
    for name, (kind, doc) in COUNTERS.items():
        assert f"# HELP {name} {doc}\n# TYPE {name} {kind}\n" in text
        assert (CATALOGUE[name].type, CATALOGUE[name].help) == (kind, doc)


def test_fields_are_in_dcgms_units(tmp_path):
    text = _exposition(_with_health(_result(tmp_path)))

    def value(name):
        return _series(text, name)[UUIDS[0]][1]

    assert value("DCGM_FI_DEV_FB_USED") == 10 * 1024 + 3                       # whole MiB
    assert value("DCGM_FI_DEV_FB_FREE") == (A100_TOTAL - USED) // MiB
    assert value("DCGM_FI_DEV_FB_USED") + value("DCGM_FI_DEV_FB_FREE") == pytest.approx(A100_TOTAL / MiB, abs=1)
    assert (value("DCGM_FI_DEV_GPU_UTIL"), value("DCGM_FI_DEV_MEM_COPY_UTIL")) == (37, 21)   # percent, not 0..1
    assert (value("DCGM_FI_DEV_GPU_TEMP"), value("DCGM_FI_DEV_MEMORY_TEMP")) == (45, 61)     # whole degrees C
    assert value("DCGM_FI_DEV_POWER_USAGE") == 250.0                                        # 250,000 mW from NVML
    assert value("DCGM_FI_DEV_FAN_SPEED") == 30


def test_each_gpu_carries_dcgm_exporters_labels(tmp_path):
    text = _exposition(_with_health(_result(tmp_path)))
    for i, uuid in enumerate(UUIDS):
        labels, _ = _series(text, "DCGM_FI_DEV_POWER_USAGE")[uuid]
        assert {k: labels[k] for k in GPU_LABELS} == {
            "gpu": str(i), "UUID": uuid, "device": f"nvidia{i}", "modelName": A100, "hostname": NODE,
            "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION}
        assert set(labels) == GPU_LABELS | POD_LABELS


def test_the_one_container_on_a_gpu_labels_it_a_shared_or_idle_gpu_has_none(tmp_path):
    text = _exposition(_with_health(_result(tmp_path)))
    for name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"):
        series = _series(text, name)
        assert len(series) == 3   # one series per GPU: HAMi-WebUI's avg() over a GPU sees one sample
        pods = {uuid: {k: labels[k] for k in POD_LABELS} for uuid, (labels, _) in series.items()}
        assert pods == {UUIDS[0]: {"pod": "", "namespace": "", "container": ""},
                        UUIDS[1]: {"pod": "vision", "namespace": "ml", "container": "trainer"},
                        UUIDS[2]: {"pod": "", "namespace": "", "container": ""}}, name


def test_a_figure_the_reading_lacks_is_no_series(tmp_path):
    result = _with_health(_result(tmp_path))
    for g in result.tick.gpus[1:]:       # boards without these sensors, and no Xid event set
        g.temperature_celsius = g.memory_temperature_celsius = g.fan_speed_ratio = None
    for g in result.tick.gpus:
        g.xid_events = g.xid_last_code = g.xid_critical_code = None
    text = _exposition(result)
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_FAN_SPEED"):
        assert set(_series(text, name)) == {UUIDS[0]}, name
    assert not _series(text, "DCGM_FI_DEV_XID_ERRORS")   # no Xid events read on any GPU
    assert set(_series(text, "DCGM_FI_DEV_FB_USED")) == set(UUIDS)


def test_xid_errors_is_the_last_code_seen_and_stays_between_ticks(tmp_path):
    def tick(events, code):
        r = _result(tmp_path)
        for g in r.tick.gpus[1:]:        # only GPU 0's event set is read
            g.xid_events = g.xid_last_code = None
        r.tick.gpus[0].xid_events, r.tick.gpus[0].xid_last_code = events, code
        return r

    first = _exposition(tick(0, None))
    (labels, value), = _series(first, "DCGM_FI_DEV_XID_ERRORS").values()   # only the GPU whose events are read
    assert (labels["UUID"], labels["err_code"], value) == (UUIDS[0], "0", 0)
    later = _exposition(tick(0, None), tick(3, 79), tick(0, None))
    (labels, value), = _series(later, "DCGM_FI_DEV_XID_ERRORS").values()
    assert (labels["err_code"], value) == ("79", 79)   # DCGM keeps the field's last value
    assert set(labels) == GPU_LABELS | POD_LABELS | {"err_code"}


def test_promtool_finds_only_dcgm_exporters_own_camel_case_label(tmp_path):
    """modelName (and UUID's family of labels) are dcgm-exporter's names: the lint's camelCase
    remark is theirs to keep; anything else (a parse error, a type or name problem) fails."""
    check = subprocess.run(["promtool", "check", "metrics"], input=_exposition(_with_health(_result(tmp_path))),
                           capture_output=True, text=True, timeout=60)
    remarks = (check.stdout + check.stderr).strip().splitlines()
    assert remarks and all(r.startswith("DCGM_FI_DEV_") and r.endswith("label names should be written in "
                                                                       "'snake_case' not 'camelCase'") for r in remarks), remarks
    plain = subprocess.run(["promtool", "check", "metrics"], input=_exposition(_with_health(_result(tmp_path)), dcgm=False),
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and not (plain.stdout + plain.stderr).strip()
