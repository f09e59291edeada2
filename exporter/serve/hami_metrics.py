"""HAMi's own metric families, from the same Tick: a drop-in for HAMi's vGPUmonitor.

`monitor` emits exactly the families of HAMi v2.10's vGPUmonitor (cmd/vGPUmonitor/metrics.go),
and the host temperature, power and ECC families its monitor added after v2.10 (docs/upstream.md):
names, help texts, label names, value scales and `zone="vGPU"` on every series but
`hami_build_info`. So HAMi's Grafana dashboard and HAMi-WebUI read this exporter as they
read the monitor, and a cluster can switch the monitor off. HAMi's scales are kept as they
are, including its `*_utilization_ratio` families holding percent (0-100).

`full` adds the per-device and per-container families of HAMi's scheduler
(cmd/scheduler/metrics.go) that HAMi's dashboard needs, computed from the grants of this
node's own pods (annotation hami.io/vgpu-devices-allocated), for clusters that do not scrape
the scheduler. `off` emits none.

Names, help texts and label names are HAMi's (exporter/serve/catalogue.py); the text exposition
sorts a series' labels by name, as the Go client does, so the lines read the same.
"""
from __future__ import annotations

import math
import platform
import sys

from slicemeter.exporter.serve.catalogue import group
from slicemeter.exporter.serve.exposition import Samples
from slicemeter.exporter.serve.scrape import FamilyCollector, Scrape, present_rows
from slicemeter.common import MiB

HAMI_METRICS_MODES = ("monitor", "full", "off")
ZONE = "vGPU"                 # the zone label both HAMi collectors are registered under
UUID_CHARS = 40               # the monitor reports DeviceUUID(i)[0:40]
CORE_LIMIT = 100              # HAMi's Devcore: 100 per GPU (deviceCoreScaling 1; always 100 in MIG mode)


def monitor_device_type(name: str) -> str:
    """vGPUmonitor's device_type: "NVIDIA-" + NVML's name, always."""
    return "NVIDIA-" + name


def scheduler_device_type(name: str) -> str:
    """The device plugin's registered Type: NVML's name, prefixed "NVIDIA-" only when it lacks "NVIDIA"."""
    return name if name.startswith("NVIDIA") else "NVIDIA-" + name


def _build_labels(version: str) -> tuple[str, ...]:
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    # the Go-named labels describe this build: slicemeter's version, Python for the toolchain
    return ("unknown", sys.implementation.name, "none", f"{sys.platform}/{arch}", "unknown", version)


def _pct(ratio: float) -> float:
    return round(ratio * 100, 6)   # the Tick keeps 0..1; HAMi's families hold percent


class HamiMonitorCollector(FamilyCollector):
    """vGPUmonitor's families: per GPU, per container read from a HAMi region, per MIG container."""

    families = group("hami_monitor")
    _REGION = (("hami_vgpu_memory_used_bytes", "hami_memory_used_bytes"),
               ("hami_vgpu_memory_limit_bytes", "hami_memory_limit_bytes"),
               ("hami_container_device_memory_bytes", "hami_memory_used_bytes"),
               ("hami_vgpu_memory_context_bytes", "hami_context_bytes"),
               ("hami_vgpu_memory_module_bytes", "hami_module_bytes"),
               ("hami_vgpu_memory_buffer_bytes", "hami_buffer_bytes"))

    def fill(self, scrape: Scrape, f: dict[str, Samples]) -> None:
        f["hami_build_info"].add(_build_labels(scrape.version), 1)
        last, tuples = scrape.last, scrape.label_tuples
        t = last.tick
        for g in t.gpus:
            if g.model is None:
                continue   # the monitor sends nothing for a GPU whose name NVML did not give
            dtype = monitor_device_type(g.model)
            index = str(g.gpu_index)
            lv = tuples((t.node, index, g.gpu_uuid, dtype, ZONE))
            if g.memory_used_bytes is not None:
                f["hami_host_gpu_memory_used_bytes"].add(lv, g.memory_used_bytes)
            if g.sm_util_ratio is not None:
                f["hami_host_gpu_utilization_ratio"].add(lv, _pct(g.sm_util_ratio))
            if g.mem_util_ratio is not None:
                f["hami_host_gpu_memory_controller_utilization_ratio"].add(tuples((index, g.gpu_uuid, dtype, ZONE)),
                                                                           _pct(g.mem_util_ratio))
            if g.temperature_celsius is not None:
                f["hami_host_gpu_temperature_celsius"].add(lv, g.temperature_celsius)
            if g.power_watts is not None:
                f["hami_host_gpu_power_usage_watts"].add(lv, g.power_watts)
            for error_type, count in (("corrected", g.ecc_corrected_aggregate), ("uncorrected", g.ecc_uncorrected_aggregate)):
                if count is not None:
                    f["hami_host_gpu_ecc_errors"].add(tuples((t.node, index, g.gpu_uuid, dtype, error_type, ZONE)), count)
        labels, region_slices = [], []   # the slices read from a HAMi region, the monitor's only source
        for s in t.slices:
            if s.source == "mig":
                m = last.mig.get((s.pod_uid, s.container, s.gpu_uuid))
                if m is not None:
                    f["hami_mig_device_info"].add((
                        s.namespace or "", s.pod or s.pod_uid, s.container, str(s.vdevice_index or 0),
                        s.gpu_uuid[:UUID_CHARS], m.uuid, m.profile or "", str(m.gpu_instance_id),
                        str(m.compute_instance_id), ZONE), 1)
            elif s.source == "hami":
                region_slices.append(s)
                labels.append(tuples((s.namespace or "", s.pod or s.pod_uid, s.container, str(s.vdevice_index),
                                      s.gpu_uuid[:UUID_CHARS], ZONE)))
        for name, attr in self._REGION:
            f[name].rows = present_rows(labels, region_slices, attr)
        f["hami_container_device_utilization_ratio"].rows = [
            (lv, _pct(s.sm_util_ratio)) for lv, s in zip(labels, region_slices) if s.sm_util_ratio is not None]
        # only once a kernel ran, in whole seconds as the monitor counts
        f["hami_container_last_kernel_elapsed_seconds"].rows = [
            (lv, max(0, math.floor(s.last_kernel_age_s))) for lv, s in zip(labels, region_slices)
            if s.last_kernel_age_s is not None]


class HamiSchedulerCollector(FamilyCollector):
    """The scheduler's per-device and per-container families, from this node's own grants."""

    families = group("hami_scheduler")

    def fill(self, scrape: Scrape, f: dict[str, Samples]) -> None:
        last = scrape.last
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
                ci = str(order.index(container) if container in order else len(order))
                for gr in grants:
                    if gr.uuid not in gpus:
                        continue   # a grant on another node's GPU
                    mem[gr.uuid] = mem.get(gr.uuid, 0) + gr.mem_mib
                    cores[gr.uuid] = cores.get(gr.uuid, 0) + gr.cores
                    shared[gr.uuid] = shared.get(gr.uuid, 0) + 1
                    lv = (pod.namespace, t.node, pod.name, ci, gr.uuid, ZONE)
                    f["hami_vgpu_memory_allocated_bytes"].add(lv, gr.mem_mib * MiB)
                    f["hami_vgpu_core_allocated_ratio"].add(lv, gr.cores)
        for g in t.gpus:
            if g.model is None or g.memory_total_bytes is None:
                continue   # the device plugin registers a GPU with its name and memory
            total_mib = g.memory_total_bytes // MiB
            used_mib = mem.get(g.gpu_uuid, 0)
            index, dtype, cores_text = str(g.gpu_index), scheduler_device_type(g.model), str(CORE_LIMIT)
            lv = (t.node, g.gpu_uuid, index, dtype, ZONE)
            f["hami_gpu_memory_limit_bytes"].add(lv, total_mib * MiB)
            f["hami_gpu_core_limit_ratio"].add(lv, CORE_LIMIT)
            f["hami_gpu_memory_allocated_bytes"].add((t.node, g.gpu_uuid, index, cores_text, dtype, ZONE), used_mib * MiB)
            f["hami_gpu_shared_count"].add(lv, shared.get(g.gpu_uuid, 0))
            f["hami_gpu_core_allocated_ratio"].add(lv, cores.get(g.gpu_uuid, 0))
            f["hami_node_gpu_overview"].add((t.node, g.gpu_uuid, index, cores_text, str(total_mib), dtype, ZONE),
                                            used_mib * MiB)
            if total_mib > 0:
                f["hami_node_gpu_memory_allocated_ratio"].add(lv, used_mib / total_mib)
