"""Prometheus view of the latest Tick: a custom Collector that builds fresh families per scrape.

Nothing is kept in long-lived gauges, so a deleted pod's series disappear with the next
Tick, and a scrape only reads the last built Tick (it never waits for NVML, files, the
kubelet or Kafka). Names and labels: docs/metrics.md.

Beside its own `slicemeter_*` families (base units, ratios 0..1) the collector emits HAMi's
(exporter/hami_metrics.py), by `--hami-metrics`: `monitor` (vGPUmonitor's), `full` (also the
scheduler's per-device families, from this node's grants) or `off`.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from slicemeter.exporter.hami_metrics import HAMI_METRICS_MODES, hami_families
from slicemeter.exporter.tick_builder import BuildResult, allocation_share, usage_share
from slicemeter.tick import SCHEMA_VERSION

SOURCES = ("nvml", "hami", "pods", "kafka")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("slicemeter")
    except PackageNotFoundError:
        return "unknown"


@dataclass
class ExporterStats:
    """Counters that outlive a Tick; updated by the tick loop and the publisher."""

    tenant: str
    version: str = field(default_factory=_version)
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: BuildResult | None = None
    source_errors: dict[str, int] = field(default_factory=lambda: {s: 0 for s in SOURCES})
    region_errors: dict[str, int] = field(default_factory=dict)
    spool_stats: Callable[[], dict[str, int]] | None = None

    def record(self, result: BuildResult) -> None:
        with self.lock:
            self.last = result
            self.source_errors["nvml"] += result.nvml_errors
            self.source_errors["pods"] += max(0, result.pod_errors)
            self.source_errors["hami"] += len(result.region_errors)
            for *_, err in result.region_errors:
                self.region_errors[err.reason] = self.region_errors.get(err.reason, 0) + 1

    def count_error(self, source: str, n: int = 1) -> None:
        with self.lock:
            self.source_errors[source] = self.source_errors.get(source, 0) + n


def _s(v: Any) -> str:
    return "" if v is None else str(v)


class ExporterCollector(Collector):
    def __init__(self, stats: ExporterStats, hami_metrics: str = "monitor"):
        if hami_metrics not in HAMI_METRICS_MODES:
            raise ValueError(f"hami_metrics must be one of {', '.join(HAMI_METRICS_MODES)}, not {hami_metrics!r}")
        self.stats = stats
        self.hami_metrics = hami_metrics

    def describe(self) -> list[Metric]:
        """Every family collect() can emit in this mode, without samples."""
        return list(self._families(None, {}, {}, None))

    def collect(self) -> Iterator[Metric]:
        st = self.stats
        with st.lock:
            last = st.last
            source_errors = dict(st.source_errors)
            region_errors = dict(st.region_errors)
        spool = st.spool_stats() if st.spool_stats else {}
        return self._families(last, source_errors, region_errors, spool)

    def _families(self, last: BuildResult | None, source_errors: dict[str, int], region_errors: dict[str, int],
                  spool: dict[str, int] | None) -> Iterator[Metric]:
        """The families; with spool None (describe) every family is left without samples."""
        st = self.stats
        yield from self._tick_families(last, st.tenant)
        yield from hami_families(last, self.hami_metrics, st.version)

        g = GaugeMetricFamily("slicemeter_scrape_duration_seconds", "Time to build the last Tick", labels=[])
        if last is not None:
            g.add_metric([], last.duration_s)
        yield g
        c = CounterMetricFamily("slicemeter_source_errors", "Errors by source (nvml, hami, pods, kafka)", labels=["source"])
        for src, n in sorted(source_errors.items()):
            c.add_metric([src], n)
        yield c
        g = GaugeMetricFamily("slicemeter_nvml_unsupported_calls",
                              "NVML calls answered NOT_SUPPORTED or FUNCTION_NOT_FOUND (counted once, not asked again); value 1",
                              labels=["gpu_index", "call"])
        for gpu, call in sorted(last.nvml_unsupported if last else (), key=lambda k: (_s(k[0]), k[1])):
            g.add_metric([_s(gpu), call], 1)
        yield g
        c = CounterMetricFamily("slicemeter_hami_region_errors", "Rejected HAMi region files by reason", labels=["reason"])
        for reason, n in sorted(region_errors.items()):
            c.add_metric([reason], n)
        yield c
        for name, key, doc in (("slicemeter_spool_ticks", "ticks", "Ticks waiting in the disk spool"),
                               ("slicemeter_spool_bytes", "bytes", "Spool size on disk")):
            g = GaugeMetricFamily(name, doc, labels=[])
            if spool and key in spool:
                g.add_metric([], spool[key])
            yield g
        for name, key, doc in (("slicemeter_spool_dropped_ticks", "dropped", "Ticks dropped from a full spool (oldest first)"),
                               ("slicemeter_spool_refused_ticks", "refused",
                                "Ticks the broker refused for good (too large, invalid), moved to the spool's refused/"),
                               ("slicemeter_published_ticks", "published", "Ticks acknowledged by Kafka")):
            c = CounterMetricFamily(name, doc, labels=[])
            if spool is not None:
                c.add_metric([], spool.get(key, 0))
            yield c
        g = GaugeMetricFamily("slicemeter_build_info", "Exporter build; value 1", labels=["version", "schema"])
        if spool is not None:
            g.add_metric([st.version, SCHEMA_VERSION], 1)
        yield g

    def _tick_families(self, last: BuildResult | None, tenant: str) -> Iterator[Metric]:
        common = ["node", "cluster", "tenant"]
        gpu_l = common + ["gpu_uuid", "gpu_index", "model"]
        slice_l = common + ["namespace", "pod", "container", "gpu_uuid", "vdevice_index"]

        def fam(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        gpu_f = {
            "memory_total": fam("slicemeter_gpu_memory_total_bytes", "NVML memory total", gpu_l),
            "memory_used": fam("slicemeter_gpu_memory_used_bytes", "NVML memory used", gpu_l),
            "sm": fam("slicemeter_gpu_sm_utilization_ratio", "NVML utilization.gpu (0..1)", gpu_l),
            "mem_util": fam("slicemeter_gpu_memory_utilization_ratio", "NVML utilization.memory (0..1)", gpu_l),
            "power": fam("slicemeter_gpu_power_watts", "NVML power usage", gpu_l),
            "slices": fam("slicemeter_gpu_slices", "Container slices on the GPU", gpu_l),
            "alloc": fam("slicemeter_gpu_allocated_ratio", "Sum of the slices' allocation shares (capped at 1)", gpu_l),
            "used": fam("slicemeter_gpu_used_ratio", "Sum of the slices' usage shares (capped at 1)", gpu_l),
        }
        energy = CounterMetricFamily("slicemeter_gpu_energy_joules", "NVML total energy consumption", labels=gpu_l)
        sl = {
            "alloc": fam("slicemeter_slice_allocation_ratio", "Dominant allocation share of the GPU (whole GPU = 1)", slice_l),
            "usage": fam("slicemeter_slice_usage_ratio", "Usage share: max(memory used / GPU memory, SM utilization)", slice_l),
            "limit": fam("slicemeter_slice_memory_limit_bytes", "HAMi memory limit (or the annotation's grant)", slice_l),
            "used": fam("slicemeter_slice_memory_used_bytes", "HAMi memory used (context + module + buffer)", slice_l),
            "nvml": fam("slicemeter_slice_memory_used_nvml_bytes", "NVML memory of the slice's processes", slice_l),
            "disagree": fam("slicemeter_slice_memory_disagreement", "1 when HAMi and NVML memory differ beyond tolerance", slice_l),
            "sm_limit": fam("slicemeter_slice_sm_limit_ratio", "HAMi SM limit as a share of the GPU (gpucores / 100); absent when the slice has no core limit", slice_l),
            "sm": fam("slicemeter_slice_sm_utilization_ratio", "SM utilization of the slice", slice_l),
            "age": fam("slicemeter_slice_last_kernel_age_seconds", "Seconds since the slice's last kernel", slice_l),
            "procs": fam("slicemeter_slice_processes", "Live CUDA processes", slice_l),
        }
        ok = fam("slicemeter_hami_region_ok", "Per slice: 1 region read, 0 rejected", common + ["namespace", "pod", "container"])

        if last is not None:
            t = last.tick
            base = [t.node, t.cluster, tenant]
            totals = {g.gpu_uuid: g.memory_total_bytes for g in t.gpus}
            alloc_sum: dict[str, float] = {}
            used_sum: dict[str, float] = {}
            names: dict[str, tuple[str | None, str | None]] = {}
            for s in t.slices:
                total = totals.get(s.gpu_uuid)
                a, u = allocation_share(s, total), usage_share(s, total)
                alloc_sum[s.gpu_uuid] = alloc_sum.get(s.gpu_uuid, 0.0) + (a or 0.0)
                used_sum[s.gpu_uuid] = used_sum.get(s.gpu_uuid, 0.0) + (u or 0.0)
                names[s.pod_uid] = (s.namespace, s.pod)
                # one label dict per slice, shared by its families (exposition.render escapes it once)
                lv = dict(zip(slice_l, base + [_s(s.namespace), _s(s.pod or s.pod_uid), s.container, s.gpu_uuid, _s(s.vdevice_index)]))
                for key, v in (("alloc", a), ("usage", u), ("limit", s.hami_memory_limit_bytes),
                               ("used", s.hami_memory_used_bytes), ("nvml", s.nvml_memory_used_bytes),
                               ("sm_limit", s.sm_limit_ratio), ("sm", s.sm_util_ratio),
                               ("age", s.last_kernel_age_s), ("procs", s.process_count)):
                    if v is not None:
                        sl[key].add_sample(sl[key].name, lv, v)
                d = last.disagreement.get((s.pod_uid, s.container, s.gpu_uuid))
                if d is not None:
                    sl["disagree"].add_sample(sl["disagree"].name, lv, 1 if d else 0)
            for g in t.gpus:
                vals = base + [g.gpu_uuid, str(g.gpu_index), _s(g.model)]
                lv = dict(zip(gpu_l, vals))
                for key, v in (("memory_total", g.memory_total_bytes), ("memory_used", g.memory_used_bytes),
                               ("sm", g.sm_util_ratio), ("mem_util", g.mem_util_ratio), ("power", g.power_watts),
                               ("slices", g.slice_count)):
                    if v is not None:
                        gpu_f[key].add_sample(gpu_f[key].name, lv, v)
                gpu_f["alloc"].add_sample(gpu_f["alloc"].name, lv, min(1.0, alloc_sum.get(g.gpu_uuid, 0.0)))
                gpu_f["used"].add_sample(gpu_f["used"].name, lv, min(1.0, used_sum.get(g.gpu_uuid, 0.0)))
                if g.energy_joules is not None:
                    energy.add_sample(energy.name + "_total", lv, g.energy_joules)
            for (uid, container), good in sorted(last.hami_ok.items()):
                ns, pod = names.get(uid, (None, None))
                ok.add_metric(base + [_s(ns), _s(pod or uid), container], 1 if good else 0)
        yield from gpu_f.values()
        yield energy
        yield from sl.values()
        yield ok
