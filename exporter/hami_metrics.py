"""HAMi's own metric families, from the same Tick: a drop-in for HAMi's vGPUmonitor.

`monitor` emits exactly the families of HAMi v2.10's vGPUmonitor (cmd/vGPUmonitor/metrics.go):
names, help texts, label names, value scales and `zone="vGPU"` on every series but
`hami_build_info`. So HAMi's Grafana dashboard and HAMi-WebUI read this exporter as they
read the monitor, and a cluster can switch the monitor off. HAMi's scales are kept as they
are, including its `*_utilization_ratio` families holding percent (0-100).

`full` adds the per-device and per-container families of HAMi's scheduler
(cmd/scheduler/metrics.go) that HAMi's dashboard needs, computed from the grants of this
node's own pods (annotation hami.io/vgpu-devices-allocated), for clusters that do not scrape
the scheduler. `off` emits none.

Label names are HAMi's; the text exposition sorts a series' labels by name, as the Go client
does, so the lines read the same. docs/metrics.md lists every family.
"""
from __future__ import annotations

import math
import platform
import sys
from typing import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric, UntypedMetricFamily

from slicemeter.common import MiB
from slicemeter.exporter.tick_builder import BuildResult

HAMI_METRICS_MODES = ("monitor", "full", "off")
ZONE = "vGPU"                 # the zone label both HAMi collectors are registered under
UUID_CHARS = 40               # the monitor reports DeviceUUID(i)[0:40]
CORE_LIMIT = 100              # HAMi's Devcore: 100 per GPU (deviceCoreScaling 1; always 100 in MIG mode)

_CTR = ["namespace", "pod", "container", "vdevice_index", "device_uuid", "zone"]
_HOST = ["node", "device_index", "device_uuid", "device_type", "zone"]
_MIG = ["namespace", "pod", "container", "vdevice_index", "device_uuid", "mig_uuid", "profile",
        "gpu_instance_id", "compute_instance_id", "zone"]
_SCHED = ["node", "device_uuid", "device_index", "device_type", "zone"]
_SCHED_CTR = ["namespace", "node", "pod", "container_index", "device_uuid", "zone"]
_BUILD = ["build_date", "compiler", "go_version", "platform", "revision", "version"]

# (name, help, labels): vGPUmonitor's descriptors
MONITOR = {
    "host_mem": ("hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", _HOST),
    "host_util": ("hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", _HOST),
    "host_mc": ("hami_host_gpu_memory_controller_utilization_ratio", "GPU memory controller utilization ratio (0-100)",
                [x for x in _HOST if x != "node"]),
    "used": ("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes", _CTR),
    "limit": ("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes", _CTR),
    "dev_mem": ("hami_container_device_memory_bytes", "Container device memory usage in bytes", _CTR),
    "util": ("hami_container_device_utilization_ratio", "Container device SM utilization ratio", _CTR),
    "last_kernel": ("hami_container_last_kernel_elapsed_seconds", "Seconds since last kernel execution in container", _CTR),
    "mig": ("hami_mig_device_info", "MIG runtime identity for a container allocation", _MIG),
    "context": ("hami_vgpu_memory_context_bytes", "Container device memory context size in bytes", _CTR),
    "module": ("hami_vgpu_memory_module_bytes", "Container device memory module size in bytes", _CTR),
    "buffer": ("hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes", _CTR),
}
BUILD_INFO = ("hami_build_info", "hami build metadata exposed as labels with a constant value of 1.", _BUILD)
# the scheduler's descriptors (per device, then per container)
SCHEDULER = {
    "mem_limit": ("hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU", _SCHED),
    "core_limit": ("hami_gpu_core_limit_ratio", "Device core limit for a certain GPU", _SCHED),
    "mem_alloc": ("hami_gpu_memory_allocated_bytes", "Device memory allocated for a certain GPU",
                  ["node", "device_uuid", "device_index", "device_cores", "device_type", "zone"]),
    "shared": ("hami_gpu_shared_count", "Number of containers sharing this GPU", _SCHED),
    "core_alloc": ("hami_gpu_core_allocated_ratio", "Device core allocated for a certain GPU", _SCHED),
    "overview": ("hami_node_gpu_overview", "GPU overview on a certain node",
                 ["node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type", "zone"]),
    "mem_ratio": ("hami_node_gpu_memory_allocated_ratio", "GPU Memory Allocated Percentage on a certain GPU", _SCHED),
    "ctr_mem": ("hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container", _SCHED_CTR),
    "ctr_core": ("hami_vgpu_core_allocated_ratio", "vGPU core allocated from a container", _SCHED_CTR),
}


def monitor_device_type(name: str) -> str:
    """vGPUmonitor's device_type: "NVIDIA-" + NVML's name, always."""
    return "NVIDIA-" + name


def scheduler_device_type(name: str) -> str:
    """The device plugin's registered Type: NVML's name, prefixed "NVIDIA-" only when it lacks "NVIDIA"."""
    return name if name.startswith("NVIDIA") else "NVIDIA-" + name


def _build_labels(version: str) -> list[str]:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    # the Go-named labels describe this build: slicemeter's version, Python for the toolchain
    return ["unknown", sys.implementation.name, "none", f"{sys.platform}/{arch}", "unknown", version]


# HAMi's gauge named *_count trips Prometheus' lint (the suffix is reserved for histograms and
# summaries); declared untyped, which the lint exempts and PromQL reads the same.
_UNTYPED = frozenset({"hami_gpu_shared_count"})


def _fams(spec: dict[str, tuple[str, str, list[str]]]) -> dict[str, GaugeMetricFamily]:
    return {k: (UntypedMetricFamily if name in _UNTYPED else GaugeMetricFamily)(name, doc, labels=labels)
            for k, (name, doc, labels) in spec.items()}


def _pct(ratio: float) -> float:
    return round(ratio * 100, 6)   # the Tick keeps 0..1; HAMi's families hold percent


def hami_families(last: BuildResult | None, mode: str, version: str) -> Iterator[Metric]:
    """HAMi's families for `mode`; without a Tick (describe) they carry no samples."""
    if mode == "off":
        return
    mon = _fams(MONITOR)
    build = GaugeMetricFamily(*BUILD_INFO[:2], labels=BUILD_INFO[2])
    sched = _fams(SCHEDULER) if mode == "full" else {}
    if last is not None:
        build.add_metric(_build_labels(version), 1)
        _monitor_samples(last, mon)
        if sched:
            _scheduler_samples(last, sched)
    yield from mon.values()
    yield build
    yield from sched.values()


def _monitor_samples(last: BuildResult, f: dict[str, GaugeMetricFamily]) -> None:
    t = last.tick
    for g in t.gpus:
        if g.model is None:
            continue   # the monitor sends nothing for a GPU whose name NVML did not give
        dtype = monitor_device_type(g.model)
        host = {"node": t.node, "device_index": str(g.gpu_index), "device_uuid": g.gpu_uuid, "device_type": dtype,
                "zone": ZONE}
        if g.memory_used_bytes is not None:
            f["host_mem"].add_sample(f["host_mem"].name, host, g.memory_used_bytes)
        if g.sm_util_ratio is not None:
            f["host_util"].add_sample(f["host_util"].name, host, _pct(g.sm_util_ratio))
        if g.mem_util_ratio is not None:
            mc = {k: v for k, v in host.items() if k != "node"}
            f["host_mc"].add_sample(f["host_mc"].name, mc, _pct(g.mem_util_ratio))
    for s in t.slices:
        if s.source == "mig":
            m = last.mig.get((s.pod_uid, s.container, s.gpu_uuid))
            if m is not None:
                f["mig"].add_sample(f["mig"].name, {
                    "namespace": s.namespace or "", "pod": s.pod or s.pod_uid, "container": s.container,
                    "vdevice_index": str(s.vdevice_index or 0), "device_uuid": s.gpu_uuid[:UUID_CHARS],
                    "mig_uuid": m.uuid, "profile": m.profile or "", "gpu_instance_id": str(m.gpu_instance_id),
                    "compute_instance_id": str(m.compute_instance_id), "zone": ZONE}, 1)
            continue
        if s.source != "hami":
            continue   # the monitor reads HAMi-core's region files only
        lv = {"namespace": s.namespace or "", "pod": s.pod or s.pod_uid, "container": s.container,
              "vdevice_index": str(s.vdevice_index), "device_uuid": s.gpu_uuid[:UUID_CHARS], "zone": ZONE}
        for key, v in (("used", s.hami_memory_used_bytes), ("limit", s.hami_memory_limit_bytes),
                       ("dev_mem", s.hami_memory_used_bytes), ("context", s.hami_context_bytes),
                       ("module", s.hami_module_bytes), ("buffer", s.hami_buffer_bytes)):
            if v is not None:
                f[key].add_sample(f[key].name, lv, v)
        if s.sm_util_ratio is not None:
            f["util"].add_sample(f["util"].name, lv, _pct(s.sm_util_ratio))
        if s.last_kernel_age_s is not None:   # only once a kernel ran, in whole seconds as the monitor counts
            f["last_kernel"].add_sample(f["last_kernel"].name, lv, max(0, math.floor(s.last_kernel_age_s)))


def _scheduler_samples(last: BuildResult, f: dict[str, GaugeMetricFamily]) -> None:
    t = last.tick
    gpus = {g.gpu_uuid: g for g in t.gpus}
    mem: dict[str, int] = {}
    cores: dict[str, int] = {}
    shared: dict[str, int] = {}
    pods = last.pods.pods.values() if last.pods is not None else ()
    for pod in pods:
        # the scheduler indexes a pod's device entries over init containers first, then containers
        order = pod.init_containers + pod.containers
        for container, grants in pod.grants.items():
            ci = order.index(container) if container in order else len(order)
            for gr in grants:
                if gr.uuid not in gpus:
                    continue   # a grant on another node's GPU
                mem[gr.uuid] = mem.get(gr.uuid, 0) + gr.mem_mib
                cores[gr.uuid] = cores.get(gr.uuid, 0) + gr.cores
                shared[gr.uuid] = shared.get(gr.uuid, 0) + 1
                lv = {"namespace": pod.namespace, "node": t.node, "pod": pod.name, "container_index": str(ci),
                      "device_uuid": gr.uuid, "zone": ZONE}
                f["ctr_mem"].add_sample(f["ctr_mem"].name, lv, gr.mem_mib * MiB)
                f["ctr_core"].add_sample(f["ctr_core"].name, lv, gr.cores)
    for g in t.gpus:
        if g.model is None or g.memory_total_bytes is None:
            continue   # the device plugin registers a GPU with its name and memory
        total_mib = g.memory_total_bytes // MiB
        used_mib = mem.get(g.gpu_uuid, 0)
        lv = {"node": t.node, "device_uuid": g.gpu_uuid, "device_index": str(g.gpu_index),
              "device_type": scheduler_device_type(g.model), "zone": ZONE}
        with_cores = lv | {"device_cores": str(CORE_LIMIT)}
        f["mem_limit"].add_sample(f["mem_limit"].name, lv, total_mib * MiB)
        f["core_limit"].add_sample(f["core_limit"].name, lv, CORE_LIMIT)
        f["mem_alloc"].add_sample(f["mem_alloc"].name, with_cores, used_mib * MiB)
        f["shared"].add_sample(f["shared"].name, lv, shared.get(g.gpu_uuid, 0))
        f["core_alloc"].add_sample(f["core_alloc"].name, lv, cores.get(g.gpu_uuid, 0))
        f["overview"].add_sample(f["overview"].name, with_cores | {"device_memory_limit": str(total_mib)}, used_mib * MiB)
        if total_mib > 0:
            f["mem_ratio"].add_sample(f["mem_ratio"].name, lv, used_mib / total_mib)
