"""dcgm-exporter's device fields, from the same Tick: `--dcgm-metrics`.

HAMi-WebUI's NVIDIA pages read a GPU's memory, utilization, temperatures, power, last Xid
and fan only from dcgm-exporter's `DCGM_FI_DEV_*` series, selected by the label `UUID`, and
the driver version and device number from the labels `DCGM_FI_DRIVER_VERSION` and `device`.
This collector serves those fields with dcgm-exporter's names, types, help texts, units and
labels, so a cluster without dcgm-exporter still fills those pages: memory in whole MiB,
utilization and fan speed in whole percent, temperatures in whole degrees C (DCGM's fields
are integers there), power in watts.

One series per GPU and family, as dcgm-exporter sends without pod mapping. Where one
container holds the GPU (whatever its share), the series carry its `pod`, `namespace` and
`container`, as dcgm-exporter's Kubernetes mapping labels a GPU with the pod the kubelet
gave it. A GPU shared by several containers keeps a single unlabelled series: copies per
container, as dcgm-exporter's shared-GPU mode makes, would enter HAMi-WebUI's averages
(`avg(DCGM_FI_DEV_FB_USED{UUID=...})`) as extra samples. Per-container figures are HAMi's
families. The labels are empty (which Prometheus stores as absent) on the other GPUs.

A figure the Tick lacks (a board without a fan or memory sensor, NVML not answering) is no
series, as dcgm-exporter skips DCGM's blank values. Off by default: beside a running
dcgm-exporter, every name would be served twice and sums over them doubled.
"""
from __future__ import annotations

import threading

from slicemeter.exporter.serve.catalogue import group
from slicemeter.exporter.serve.exposition import Samples
from slicemeter.exporter.serve.scrape import FamilyCollector, Scrape, label_value
from slicemeter.common import MiB
from slicemeter.tick import GpuReading


def _whole_pct(ratio: float) -> int:
    return round(ratio * 100)


def holders(tick) -> dict[str, tuple[str, str, str]]:
    """GPU uuid -> (container, namespace, pod) of the one container on it; GPUs with several
    containers or none are left out."""
    on: dict[str, set[tuple[str, str, str]]] = {}
    for s in tick.slices:
        on.setdefault(s.gpu_uuid, set()).add((s.container, label_value(s.namespace), s.pod or s.pod_uid))
    return {uuid: next(iter(c)) for uuid, c in on.items() if len(c) == 1}


def _whole_mib(n: int) -> int:
    return n // MiB


# family, the reading's attribute, DCGM's unit from the Tick's
_FROM_READING = (("DCGM_FI_DEV_FB_USED", "memory_used_bytes", _whole_mib),
                 ("DCGM_FI_DEV_GPU_UTIL", "sm_util_ratio", _whole_pct),
                 ("DCGM_FI_DEV_MEM_COPY_UTIL", "mem_util_ratio", _whole_pct),
                 ("DCGM_FI_DEV_GPU_TEMP", "temperature_celsius", round),
                 ("DCGM_FI_DEV_MEMORY_TEMP", "memory_temperature_celsius", round),
                 ("DCGM_FI_DEV_POWER_USAGE", "power_watts", float),
                 ("DCGM_FI_DEV_FAN_SPEED", "fan_speed_ratio", _whole_pct))


def field_values(g: GpuReading) -> list[tuple[str, int | float]]:
    """(family, value) of each field the reading has, in DCGM's units."""
    out: list[tuple[str, int | float]] = []
    if g.memory_total_bytes is not None and g.memory_used_bytes is not None:
        out.append(("DCGM_FI_DEV_FB_FREE", _whole_mib(max(0, g.memory_total_bytes - g.memory_used_bytes))))
    for name, attr, unit in _FROM_READING:
        v = getattr(g, attr)
        if v is not None:
            out.append((name, unit(v)))
    return out


class LastXid:
    """Each GPU's last Xid code across Ticks: DCGM's XID_ERRORS field keeps the last one seen,
    while a Tick carries only those since the previous Tick. 0 until a GPU's first Xid; a
    GPU enters once its Xid events are read (`xid_events` not null)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: object = None
        self._codes: dict[str, int] = {}

    def of(self, result) -> dict[str, int]:
        with self._lock:
            if result is not self._seen:
                self._seen = result
                uuids = set()
                for g in result.tick.gpus:
                    uuids.add(g.gpu_uuid)
                    if g.xid_last_code is not None:
                        self._codes[g.gpu_uuid] = g.xid_last_code
                    elif g.xid_events is not None:
                        self._codes.setdefault(g.gpu_uuid, 0)
                # a GPU that left the node leaves the table: it stays bounded by the node's GPUs
                self._codes = {u: c for u, c in self._codes.items() if u in uuids}
            return dict(self._codes)


class DcgmCollector(FamilyCollector):
    families = group("dcgm")

    def __init__(self, stats):
        super().__init__(stats)
        self.last_xid = LastXid()

    def fill(self, scrape: Scrape, f: dict[str, Samples]) -> None:
        last = scrape.last
        t = last.tick
        held = holders(t)
        xid = self.last_xid.of(last)
        driver = label_value(last.driver_version)
        for g in t.gpus:
            if g.gpu_index < 0:
                continue   # a device NVML does not read: dcgm-exporter knows NVIDIA GPUs only
            index = str(g.gpu_index)
            base = (index, g.gpu_uuid, "nvidia" + index, label_value(g.model), t.node, driver)
            lv = scrape.label_tuples(base + held.get(g.gpu_uuid, ("", "", "")))
            for name, value in field_values(g):
                f[name].add(lv, value)
            code = xid.get(g.gpu_uuid)
            if code is not None:
                f["DCGM_FI_DEV_XID_ERRORS"].add(scrape.label_tuples(lv + (str(code),)), code)
