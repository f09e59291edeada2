"""Every family the exporter serves on /metrics: name, type, help text, labels, one table.

The collectors build their families from these rows, docs/metrics.md's tables are generated
from them (`python -m slicemeter.exporter.serve.catalogue docs/metrics.md`; a test checks the file
is current) and grafana/build_dashboards.py refuses a panel that reads a family or label
missing here. The order of the rows is the order of the families on /metrics.

`hami_*` families keep HAMi v2.10's names, help texts and label names (cmd/vGPUmonitor/
metrics.go, cmd/scheduler/metrics.go) so HAMi's dashboards read this exporter unchanged.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Family:
    name: str                 # family name; a counter's samples add `_total`
    type: str                 # gauge | counter | untyped
    help: str                 # the HELP text on /metrics
    labels: tuple[str, ...]
    group: str                # which collector emits it, and its table in docs/metrics.md
    doc: str = ""             # docs/metrics.md's meaning where it says more than the help

    @property
    def sample_name(self) -> str:
        return self.name + "_total" if self.type == "counter" else self.name

    @property
    def meaning(self) -> str:
        return self.doc or self.help


COMMON = ("node", "cluster", "tenant")
GPU = COMMON + ("gpu_uuid", "gpu_index", "model")
SLICE = COMMON + ("namespace", "pod", "container", "gpu_uuid", "vdevice_index", "claim", "driver")
CONTAINER = COMMON + ("namespace", "pod", "container")
HAMI_CTR = ("namespace", "pod", "container", "vdevice_index", "device_uuid", "zone")
HAMI_HOST = ("node", "device_index", "device_uuid", "device_type", "zone")
HAMI_MIG = ("namespace", "pod", "container", "vdevice_index", "device_uuid", "mig_uuid", "profile",
            "gpu_instance_id", "compute_instance_id", "zone")
HAMI_BUILD = ("build_date", "compiler", "go_version", "platform", "revision", "version")
SCHED = ("node", "device_uuid", "device_index", "device_type", "zone")
SCHED_CORES = ("node", "device_uuid", "device_index", "device_cores", "device_type", "zone")
SCHED_OVERVIEW = ("node", "device_uuid", "device_index", "device_cores", "device_memory_limit", "device_type", "zone")
SCHED_CTR = ("namespace", "node", "pod", "container_index", "device_uuid", "zone")
HAMI_ECC = HAMI_HOST[:-1] + ("error_type", "zone")
# dcgm-exporter's GPU labels (UUID, not the older uuid), its label field, then the container holding the GPU
DCGM = ("gpu", "UUID", "device", "modelName", "hostname", "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod")

# group -> the heading of its table in docs/metrics.md
GROUPS = {
    "gpu": "per GPU",
    "gpu_health": "GPU health (docs/health.md)",
    "slice": "per slice",
    "hami_monitor": "HAMi's vGPUmonitor (`--hami-metrics monitor` and `full`)",
    "hami_scheduler": "HAMi's scheduler (`--hami-metrics full`)",
    "dcgm": "dcgm-exporter's fields (`--dcgm-metrics`)",
    "health": "health",
}

_ROWS = [
    Family("slicemeter_gpu_memory_total_bytes", "gauge", "NVML memory total", GPU, "gpu"),
    Family("slicemeter_gpu_memory_used_bytes", "gauge", "NVML memory used", GPU, "gpu"),
    Family("slicemeter_gpu_sm_utilization_ratio", "gauge", "NVML utilization.gpu (0..1)", GPU, "gpu"),
    Family("slicemeter_gpu_memory_utilization_ratio", "gauge", "NVML utilization.memory (0..1)", GPU, "gpu",
           "NVML utilization.memory (memory controller), 0..1"),
    Family("slicemeter_gpu_power_watts", "gauge", "NVML power usage", GPU, "gpu"),
    Family("slicemeter_gpu_slices", "gauge", "Container slices on the GPU", GPU, "gpu"),
    Family("slicemeter_gpu_allocated_ratio", "gauge", "Sum of the slices' allocation shares (capped at 1)", GPU, "gpu",
           "Sum of the slices' allocation shares (dominant share, capped at 1)"),
    Family("slicemeter_gpu_used_ratio", "gauge", "Sum of the slices' usage shares (capped at 1)", GPU, "gpu"),
    Family("slicemeter_gpu_energy_joules", "counter", "NVML total energy consumption", GPU, "gpu"),

    Family("slicemeter_gpu_temperature_celsius", "gauge", "NVML GPU (die) temperature", GPU, "gpu_health"),
    Family("slicemeter_gpu_memory_temperature_celsius", "gauge", "NVML memory (HBM) temperature", GPU, "gpu_health",
           "NVML memory temperature (field NVML_FI_DEV_MEMORY_TEMP); absent where the board has no sensor"),
    Family("slicemeter_gpu_fan_speed_ratio", "gauge", "NVML fan speed as a share of its maximum", GPU, "gpu_health",
           "NVML fan speed / 100 (may pass 1); absent on passively cooled boards"),
    Family("slicemeter_gpu_ecc_errors", "counter", "NVML ECC error count", GPU + ("error_type", "counter"),
           "gpu_health", "NVML ECC errors; `error_type` corrected or uncorrected, `counter` volatile (since the "
           "driver loaded: resets) or aggregate (the board's lifetime)"),
    Family("slicemeter_gpu_retired_pages_pending", "gauge", "1 when retired pages wait for a reset", GPU, "gpu_health",
           "1 when pages marked for retirement wait for the next reset (boards before Ampere)"),
    Family("slicemeter_gpu_remapped_rows", "gauge", "Rows remapped by the cause of the error", GPU + ("cause",),
           "gpu_health", "Rows remapped; `cause` correctable or uncorrectable (Ampere and later)"),
    Family("slicemeter_gpu_row_remap_pending", "gauge", "1 when a row remap waits for a reset", GPU, "gpu_health"),
    Family("slicemeter_gpu_row_remap_failed", "gauge", "1 when a row remap failed", GPU, "gpu_health",
           "1 when a row remap failed: the GPU needs service"),
    Family("slicemeter_gpu_pcie_replays", "counter", "NVML PCIe replay counter", GPU, "gpu_health"),
    Family("slicemeter_gpu_clock_event_reason", "gauge", "1 while the reason holds the GPU's clocks down",
           GPU + ("reason",), "gpu_health", "1 while NVML's clock-event reason `reason` is active, else 0 (one "
           "series per reason, docs/health.md)"),
    Family("slicemeter_gpu_throttled", "gauge", "1 while power or heat hold the clocks down", GPU, "gpu_health",
           "1 while a throttle reason is active (power cap, HW slowdown, thermal, power brake), else 0"),
    Family("slicemeter_gpu_violation_seconds", "counter", "NVML time the clocks were held below target by a policy",
           GPU + ("policy",), "gpu_health", "NVML violation time, seconds; `policy` power or thermal"),
    Family("slicemeter_gpu_xid_errors", "counter", "Xid events by code since the exporter started",
           GPU + ("xid",), "gpu_health", "Xid events by code since the exporter started; the critical class "
           "from 0; at most 32 other codes per GPU, the rest as `xid=\"other\"`"),
    Family("slicemeter_gpu_last_xid", "gauge", "The last Xid code seen on the GPU", GPU, "gpu_health",
           "The last Xid code seen since the exporter started; absent before the first"),
    Family("slicemeter_gpu_lost", "gauge", "1 when NVML answers GPU_IS_LOST", GPU, "gpu_health",
           "1 when NVML answers GPU_IS_LOST (fallen off the bus): its other figures are absent"),

    Family("slicemeter_slice_allocation_ratio", "gauge", "Dominant allocation share of the GPU (whole GPU = 1)", SLICE, "slice"),
    Family("slicemeter_slice_usage_ratio", "gauge", "Usage share: max(memory used / GPU memory, SM utilization)", SLICE,
           "slice", "Usage share: max(memory used / GPU memory, SM utilization); memory used = the larger of HAMi's "
           "and NVML's"),
    Family("slicemeter_slice_memory_limit_bytes", "gauge", "HAMi memory limit (or the annotation's grant)", SLICE, "slice"),
    Family("slicemeter_slice_memory_used_bytes", "gauge", "HAMi memory used (context + module + buffer)", SLICE, "slice"),
    Family("slicemeter_slice_memory_used_nvml_bytes", "gauge", "NVML memory of the slice's processes", SLICE, "slice",
           "NVML memory of the slice's processes (its cgroup's and its slots' host pids)"),
    Family("slicemeter_slice_memory_disagreement", "gauge", "1 when HAMi and NVML memory differ beyond tolerance", SLICE,
           "slice"),
    Family("slicemeter_slice_mig_disagreement", "gauge",
           "1 when HAMi's MIG allocation and NVML's MIG devices disagree about the slice", SLICE, "slice",
           "1 when HAMi's MIG allocation (`hami.io/vgpu-mig-allocations`) and NVML's MIG devices disagree about "
           "the slice (its MIG device missing, another profile or GPU instance, its processes on another "
           "instance); the slice is still metered, by the allocation; absent for slices without one"),
    Family("slicemeter_slice_usage_verified", "gauge",
           "1 when the slice's usage was checked against NVML's processes, 0 when it could not be", SLICE, "slice",
           "1 when the slice's usage was checked against NVML's processes (each placed by its cgroup or a region "
           "slot's host pid; cgroup and MIG slices are NVML's own figures), 0 when it could not be: NVML's process "
           "list unavailable, a process neither the host /proc (no `hostPID`) nor a slot places, or GPU memory far "
           "above its slices' with no process attributed (alert `SlicemeterUsageUnverified`)"),
    Family("slicemeter_slice_sm_limit_ratio", "gauge",
           "HAMi SM limit as a share of the GPU (gpucores / 100); absent when the slice has no core limit", SLICE, "slice",
           "HAMi SM limit as a share of the GPU (gpucores / 100); absent when the slice has no core limit "
           "(HAMi-core stores 0 or 100 then)"),
    Family("slicemeter_slice_sm_utilization_ratio", "gauge", "SM utilization of the slice", SLICE, "slice"),
    Family("slicemeter_slice_last_kernel_age_seconds", "gauge", "Seconds since the slice's last kernel", SLICE, "slice",
           "Seconds since the slice's last kernel (absent: never)"),
    Family("slicemeter_slice_processes", "gauge", "Live CUDA processes", SLICE, "slice"),
    Family("slicemeter_hami_region_ok", "gauge", "Per slice: 1 region read, 0 rejected", CONTAINER, "slice",
           "Per container with a region: 1 region read, 0 rejected"),

    Family("hami_host_gpu_memory_used_bytes", "gauge", "GPU device memory usage in bytes", HAMI_HOST, "hami_monitor",
           "NVML memory used"),
    Family("hami_host_gpu_utilization_ratio", "gauge", "GPU core utilization ratio (0-100)", HAMI_HOST, "hami_monitor",
           "NVML utilization.gpu, percent (absent for a GPU in MIG mode, as upstream: NVML keeps none)"),
    Family("hami_host_gpu_memory_controller_utilization_ratio", "gauge", "GPU memory controller utilization ratio (0-100)",
           tuple(x for x in HAMI_HOST if x != "node"), "hami_monitor", "NVML utilization.memory, percent; no `node`, as upstream"),
    Family("hami_host_gpu_temperature_celsius", "gauge", "GPU temperature in degrees Celsius", HAMI_HOST, "hami_monitor",
           "NVML GPU temperature, degrees Celsius"),
    Family("hami_host_gpu_power_usage_watts", "gauge", "GPU power draw in watts", HAMI_HOST, "hami_monitor",
           "NVML power usage, watts"),
    Family("hami_host_gpu_ecc_errors", "counter", "Lifetime aggregate ECC errors", HAMI_ECC, "hami_monitor",
           "NVML aggregate ECC error counts, `error_type` `corrected` or `uncorrected`"),
    Family("hami_vgpu_memory_used_bytes", "gauge", "vGPU device memory usage in bytes", HAMI_CTR, "hami_monitor",
           "Region memory used (context + module + buffer)"),
    Family("hami_vgpu_memory_limit_bytes", "gauge", "vGPU device memory limit in bytes", HAMI_CTR, "hami_monitor",
           "Region memory limit"),
    Family("hami_container_device_memory_bytes", "gauge", "Container device memory usage in bytes", HAMI_CTR,
           "hami_monitor", "The same memory used (upstream sends both)"),
    Family("hami_container_device_utilization_ratio", "gauge", "Container device SM utilization ratio", HAMI_CTR,
           "hami_monitor", "The slice's SM utilization, percent, at most 100 (NVML's per-process samples when there "
           "are, else the region's sum; upstream sums the region's slots unbounded)"),
    Family("hami_container_last_kernel_elapsed_seconds", "gauge", "Seconds since last kernel execution in container",
           HAMI_CTR, "hami_monitor", "Whole seconds since the last kernel; absent until one ran"),
    Family("hami_mig_device_info", "gauge", "MIG runtime identity for a container allocation", HAMI_MIG, "hami_monitor",
           "1 per container on a MIG device (from NVML and the process' cgroup; upstream reads them from the "
           "`hami.io/vgpu-mig-allocations` annotation)"),
    Family("hami_vgpu_memory_context_bytes", "gauge", "Container device memory context size in bytes", HAMI_CTR,
           "hami_monitor", "Region memory: CUDA contexts"),
    Family("hami_vgpu_memory_module_bytes", "gauge", "Container device memory module size in bytes", HAMI_CTR,
           "hami_monitor", "Region memory: loaded modules"),
    Family("hami_vgpu_memory_buffer_bytes", "gauge", "Container device memory buffer size in bytes", HAMI_CTR,
           "hami_monitor", "Region memory: allocations"),
    Family("hami_build_info", "gauge", "hami build metadata exposed as labels with a constant value of 1.", HAMI_BUILD,
           "hami_monitor", "1; the labels describe this slicemeter build"),

    Family("hami_gpu_memory_limit_bytes", "gauge", "Device memory limit for a certain GPU", SCHED, "hami_scheduler",
           "The GPU's memory in whole MiB, as bytes"),
    Family("hami_gpu_core_limit_ratio", "gauge", "Device core limit for a certain GPU", SCHED, "hami_scheduler", "100"),
    Family("hami_gpu_memory_allocated_bytes", "gauge", "Device memory allocated for a certain GPU", SCHED_CORES,
           "hami_scheduler", "Sum of the grants' memory; `device_cores` is 100"),
    # a gauge named *_count trips Prometheus' lint (the suffix is reserved for histograms and
    # summaries); untyped is exempt and PromQL reads it the same
    Family("hami_gpu_shared_count", "untyped", "Number of containers sharing this GPU", SCHED, "hami_scheduler",
           "Containers granted on the GPU (untyped: Prometheus' lint reserves `_count` for histograms)"),
    Family("hami_gpu_core_allocated_ratio", "gauge", "Device core allocated for a certain GPU", SCHED, "hami_scheduler",
           "Sum of the grants' cores, percent"),
    Family("hami_node_gpu_overview", "gauge", "GPU overview on a certain node", SCHED_OVERVIEW, "hami_scheduler",
           "Allocated memory bytes; `device_memory_limit` in MiB"),
    Family("hami_node_gpu_memory_allocated_ratio", "gauge", "GPU Memory Allocated Percentage on a certain GPU", SCHED,
           "hami_scheduler", "Allocated / total memory, 0..1 (upstream's scale, though its dashboard shows a percent)"),
    Family("hami_vgpu_memory_allocated_bytes", "gauge", "vGPU memory allocated from a container", SCHED_CTR,
           "hami_scheduler", "Per granted container: bytes"),
    Family("hami_vgpu_core_allocated_ratio", "gauge", "vGPU core allocated from a container", SCHED_CTR,
           "hami_scheduler", "Per granted container: cores, percent"),

    # help texts: dcgm-exporter's etc/default-counters.csv (FAN_SPEED is not in it: DCGM's field description)
    Family("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", DCGM, "dcgm",
           "NVML memory total - used, whole MiB"),
    Family("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", DCGM, "dcgm", "NVML memory used, whole MiB"),
    Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", DCGM, "dcgm",
           "NVML utilization.gpu, whole percent (absent in MIG mode)"),
    Family("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", DCGM, "dcgm",
           "NVML utilization.memory, whole percent"),
    Family("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", DCGM, "dcgm", "NVML GPU temperature, whole degrees C"),
    Family("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", DCGM, "dcgm",
           "NVML memory temperature, whole degrees C, where the board has it"),
    Family("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", DCGM, "dcgm", "NVML power usage, watts"),
    Family("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", DCGM + ("err_code",), "dcgm",
           "The last Xid code since the exporter started, 0 before one (`err_code` the same; no `err_msg`); "
           "absent where NVML's Xid events are not read"),
    Family("DCGM_FI_DEV_FAN_SPEED", "gauge", "Fan speed for the device in percent 0-100", DCGM, "dcgm",
           "NVML fan speed, whole percent, where the board has a fan"),

    Family("slicemeter_scrape_duration_seconds", "gauge", "Time to build the last Tick", (), "health"),
    Family("slicemeter_source_errors", "counter", "Errors by source (nvml, hami, pods, kafka)", ("source",), "health"),
    Family("slicemeter_nvml_unsupported_calls", "gauge",
           "NVML calls answered NOT_SUPPORTED or FUNCTION_NOT_FOUND (counted once, not asked again); value 1",
           ("gpu_index", "call"), "health", "1 per NVML call a GPU does not offer (`gpu_index` empty for node-level "
           "calls): counted once in the errors, then no longer asked"),
    Family("slicemeter_hami_region_errors", "counter", "Rejected HAMi region files by reason", ("reason",), "health"),
    Family("slicemeter_spool_ticks", "gauge", "Ticks waiting in the disk spool", (), "health"),
    Family("slicemeter_spool_bytes", "gauge", "Spool size on disk", (), "health"),
    Family("slicemeter_spool_dropped_ticks", "counter", "Ticks dropped from a full spool (oldest first)", (), "health"),
    Family("slicemeter_spool_refused_ticks", "counter",
           "Ticks the broker refused for good (too large, invalid), moved to the spool's refused/", (), "health"),
    Family("slicemeter_published_ticks", "counter", "Ticks acknowledged by Kafka", (), "health",
           "Ticks acknowledged by Kafka (0 in Prometheus-only mode)"),
    Family("slicemeter_build_info", "gauge", "Exporter build; value 1", ("version", "schema"), "health"),
]

CATALOGUE: dict[str, Family] = {f.name: f for f in _ROWS}
if len(CATALOGUE) != len(_ROWS):
    raise RuntimeError("a family is listed twice in the catalogue")


def group(name: str) -> tuple[Family, ...]:
    return tuple(f for f in _ROWS if f.group == name)


def by_sample_name() -> dict[str, Family]:
    """What a PromQL expression names (a counter's `_total`) -> its family."""
    return {f.sample_name: f for f in _ROWS}


# ---------------------------------------------------------------- docs/metrics.md

# label sets docs/metrics.md names in words (its prose lists them)
_LABEL_SET_NAMES = {GPU: "GPU labels", SLICE: "slice labels", HAMI_CTR: "container labels", HAMI_HOST: "host labels",
                    SCHED: "device labels", SCHED_CTR: "granted-container labels", DCGM: "DCGM labels"}
_BLOCK = re.compile(r"(<!-- catalogue:(?P<group>[a-z_]+) -->\n).*?(<!-- /catalogue -->)", re.S)


def markdown_table(group_name: str) -> str:
    lines = ["| name | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for f in group(group_name):
        labels = _label_text(f.labels)
        lines.append(f"| `{f.sample_name}` | {f.type} | {labels} | {f.meaning} |")
    return "\n".join(lines) + "\n"


def _label_text(labels: tuple[str, ...]) -> str:
    """A named label set in words, with any labels past it listed (GPU labels, `policy`)."""
    for base, name in _LABEL_SET_NAMES.items():
        if labels[:len(base)] == base:
            return ", ".join([name, *(f"`{x}`" for x in labels[len(base):])])
    return ", ".join(f"`{x}`" for x in labels) or "none"


def render_docs(text: str) -> str:
    """`text` with every `<!-- catalogue:GROUP -->` ... `<!-- /catalogue -->` block regenerated."""
    def table(m: re.Match) -> str:
        if m["group"] not in GROUPS:
            raise ValueError(f"docs block names group {m['group']!r}; known: {', '.join(GROUPS)}")
        return m.group(1) + markdown_table(m["group"]) + m.group(3)

    return _BLOCK.sub(table, text)


def main(argv: list[str]) -> int:
    """Rewrite the catalogue tables of the given markdown files in place."""
    for path in map(Path, argv):
        path.write_text(render_docs(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
