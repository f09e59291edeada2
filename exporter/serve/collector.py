"""Prometheus view of the latest Tick: small collectors, fresh families per scrape.

Nothing is kept in long-lived gauges, so a deleted pod's series disappear with the next
Tick, and a scrape only reads the last built Tick (it never waits for NVML, files, the
kubelet or Kafka). Each collector emits one group of exporter/serve/catalogue.py's families and
describes exactly those, so a registry's duplicate check sees every name:

- `GpuCollector`: per GPU, NVML's figures and the sums of its slices' shares;
- `GpuHealthCollector`: per GPU, NVML's health figures (docs/health.md);
- `SliceCollector`: per slice, and per container whether its HAMi region was read;
- `HamiMonitorCollector`, `HamiSchedulerCollector` (exporter/serve/hami_metrics.py): HAMi's own
  families, by `--hami-metrics`: `monitor`, `full` (both) or `off`;
- `DcgmCollector` (exporter/serve/dcgm_metrics.py): dcgm-exporter's fields, with `--dcgm-metrics`;
- `HealthCollector`: the exporter process (errors, spool, build).

`ExporterCollector` is all of them for one node. Its `exposition()` is GET /metrics: the
text of the Tick's families is built once per Tick (a Tick does not change between
scrapes), the health families per scrape.
"""
from __future__ import annotations

import threading

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from slicemeter.exporter.serve.catalogue import group
from slicemeter.exporter.serve.dcgm_metrics import DcgmCollector
from slicemeter.exporter.serve.exposition import FamilyTexts, LabelText, Samples, render
from slicemeter.exporter.serve.hami_metrics import HAMI_METRICS_MODES, HamiMonitorCollector, HamiSchedulerCollector
from slicemeter.exporter.serve.scrape import (ExporterStats, FamilyCollector, LabelTuples, Scrape, label_value as _s,
                                              present_rows, reading_rows)
from slicemeter.exporter.assemble.tick_builder import BuildResult
from slicemeter.exporter.sources.gpu_health import CLOCK_EVENT_REASONS, CRITICAL_XIDS, XID_OTHER, throttled
from slicemeter.tick import SCHEMA_VERSION

__all__ = ["ExporterCollector", "ExporterStats", "GpuCollector", "GpuHealthCollector", "HealthCollector",
           "SliceCollector"]


class GpuCollector(FamilyCollector):
    families = group("gpu")
    _FROM_READING = (("slicemeter_gpu_memory_total_bytes", "memory_total_bytes"),
                     ("slicemeter_gpu_memory_used_bytes", "memory_used_bytes"),
                     ("slicemeter_gpu_sm_utilization_ratio", "sm_util_ratio"),
                     ("slicemeter_gpu_memory_utilization_ratio", "mem_util_ratio"),
                     ("slicemeter_gpu_power_watts", "power_watts"),
                     ("slicemeter_gpu_slices", "slice_count"),
                     ("slicemeter_gpu_energy_joules", "energy_joules"))

    def fill(self, scrape: Scrape, out: dict[str, Samples]) -> None:
        view = scrape.view
        families, values_of = reading_rows(out, self._FROM_READING)
        allocated, used = out["slicemeter_gpu_allocated_ratio"].rows, out["slicemeter_gpu_used_ratio"].rows
        for g in view.last.tick.gpus:
            lv = scrape.label_tuples(view.base + (g.gpu_uuid, str(g.gpu_index), _s(g.model)))
            for rows, v in zip(families, values_of(g)):
                if v is not None:
                    rows.append((lv, v))
            allocated.append((lv, min(1.0, view.allocated.get(g.gpu_uuid, 0.0))))
            used.append((lv, min(1.0, view.used.get(g.gpu_uuid, 0.0))))


class GpuHealthCollector(FamilyCollector):
    families = group("gpu_health")
    _FROM_READING = (("slicemeter_gpu_temperature_celsius", "temperature_celsius"),
                     ("slicemeter_gpu_memory_temperature_celsius", "memory_temperature_celsius"),
                     ("slicemeter_gpu_fan_speed_ratio", "fan_speed_ratio"),
                     ("slicemeter_gpu_retired_pages_pending", "retired_pages_pending"),
                     ("slicemeter_gpu_row_remap_pending", "remapped_rows_pending"),
                     ("slicemeter_gpu_row_remap_failed", "remapped_rows_failed"),
                     ("slicemeter_gpu_pcie_replays", "pcie_replay_total"))
    _ECC = tuple((kind, counter) for kind in ("corrected", "uncorrected") for counter in ("volatile", "aggregate"))

    def fill(self, scrape: Scrape, out: dict[str, Samples]) -> None:
        view = scrape.view
        families, values_of = reading_rows(out, self._FROM_READING)
        for g in view.last.tick.gpus:
            gpu = view.base + (g.gpu_uuid, str(g.gpu_index), _s(g.model))
            lv = scrape.label_tuples(gpu)
            h = view.last.gpu_health.get(g.gpu_uuid)
            if g.gpu_lost is not None:     # None: no NVML reads the device (metered by allocation)
                out["slicemeter_gpu_lost"].add(lv, 1 if g.gpu_lost else 0)
            if h is not None and h.xid_totals is not None:
                # the critical codes from 0, so that increase() sees a GPU's first one
                for code, n in sorted({**dict.fromkeys(CRITICAL_XIDS, 0), **h.xid_totals}.items()):
                    xid = "other" if code == XID_OTHER else str(code)
                    out["slicemeter_gpu_xid_errors"].add(scrape.label_tuples(gpu + (xid,)), n)
                if h.xid_last_ever is not None:
                    out["slicemeter_gpu_last_xid"].add(lv, h.xid_last_ever)
            if g.gpu_lost:
                continue
            for rows, v in zip(families, values_of(g)):
                if v is not None:
                    rows.append((lv, float(v)))
            for kind, counter in self._ECC:
                n = getattr(g, f"ecc_{kind}_{counter}")
                if n is not None:
                    out["slicemeter_gpu_ecc_errors"].add(scrape.label_tuples(gpu + (kind, counter)), n)
            if h is not None and h.remapped_rows is not None:
                for cause, n in zip(("correctable", "uncorrectable"), h.remapped_rows):
                    out["slicemeter_gpu_remapped_rows"].add(scrape.label_tuples(gpu + (cause,)), n)
            if g.clock_event_reasons is not None:
                for bit, reason in CLOCK_EVENT_REASONS.items():
                    out["slicemeter_gpu_clock_event_reason"].add(scrape.label_tuples(gpu + (reason,)),
                                                                  1 if g.clock_event_reasons & bit else 0)
                out["slicemeter_gpu_throttled"].add(lv, 1 if throttled(g.clock_event_reasons) else 0)
            for policy in ("power", "thermal"):
                seconds = getattr(g, f"{policy}_violation_seconds_total")
                if seconds is not None:
                    out["slicemeter_gpu_violation_seconds"].add(scrape.label_tuples(gpu + (policy,)), seconds)


class SliceCollector(FamilyCollector):
    families = group("slice")
    _FROM_READING = (("slicemeter_slice_memory_limit_bytes", "hami_memory_limit_bytes"),
                     ("slicemeter_slice_memory_used_bytes", "hami_memory_used_bytes"),
                     ("slicemeter_slice_memory_used_nvml_bytes", "nvml_memory_used_bytes"),
                     ("slicemeter_slice_sm_limit_ratio", "sm_limit_ratio"),
                     ("slicemeter_slice_sm_utilization_ratio", "sm_util_ratio"),
                     ("slicemeter_slice_last_kernel_age_seconds", "last_kernel_age_s"),
                     ("slicemeter_slice_processes", "process_count"))

    def fill(self, scrape: Scrape, out: dict[str, Samples]) -> None:
        view = scrape.view
        slices = view.slices
        labels = [sv.labels for sv in slices]
        readings = [sv.reading for sv in slices]
        out["slicemeter_slice_allocation_ratio"].rows = [(sv.labels, sv.allocation) for sv in slices
                                                         if sv.allocation is not None]
        out["slicemeter_slice_usage_ratio"].rows = [(sv.labels, sv.usage) for sv in slices if sv.usage is not None]
        for name, attr in self._FROM_READING:
            out[name].rows = present_rows(labels, readings, attr)
        disagreement = view.last.disagreement
        disagree = out["slicemeter_slice_memory_disagreement"].rows
        for lv, s in zip(labels, readings):
            d = disagreement.get((s.pod_uid, s.container, s.gpu_uuid))
            if d is not None:
                disagree.append((lv, 1 if d else 0))
        mig_flags = view.last.mig_disagreement
        out["slicemeter_slice_mig_disagreement"].rows = [
            (lv, 1 if (s.pod_uid, s.container, s.gpu_uuid) in mig_flags else 0)
            for lv, s in zip(labels, readings) if s.source == "mig"]
        out["slicemeter_slice_usage_verified"].rows = [(lv, 1 if s.usage_verified else 0)
                                                       for lv, s in zip(labels, readings) if s.usage_verified is not None]
        ok = out["slicemeter_hami_region_ok"].rows
        for (uid, container), good in sorted(view.last.hami_ok.items()):
            ns, pod = view.names.get(uid, (None, None))
            ok.append((scrape.label_tuples(view.base + (_s(ns), _s(pod or uid), container)), 1 if good else 0))


class HealthCollector(FamilyCollector):
    families = group("health")
    _SPOOL_GAUGES = (("slicemeter_spool_ticks", "ticks"), ("slicemeter_spool_bytes", "bytes"))
    _SPOOL_COUNTERS = (("slicemeter_spool_dropped_ticks", "dropped"), ("slicemeter_spool_refused_ticks", "refused"),
                       ("slicemeter_published_ticks", "published"))

    def samples(self, scrape: Scrape) -> list[Samples]:
        """Every family, also without a Tick: the counters exist from the first scrape."""
        out = {f.name: Samples(f) for f in self.families}
        last = scrape.last
        if last is not None:
            out["slicemeter_scrape_duration_seconds"].add((), last.duration_s)
            for gpu, call in sorted(last.nvml_unsupported, key=lambda k: (_s(k[0]), k[1])):
                out["slicemeter_nvml_unsupported_calls"].add((_s(gpu), call), 1)
        for src, n in sorted(scrape.source_errors.items()):
            out["slicemeter_source_errors"].add((src,), n)
        for reason, n in sorted(scrape.region_errors.items()):
            out["slicemeter_hami_region_errors"].add((reason,), n)
        spool = scrape.spool
        for name, key in self._SPOOL_GAUGES:
            if key in spool:   # gauges only with a spool; a Prometheus-only exporter has none
                out[name].add((), spool[key])
        for name, key in self._SPOOL_COUNTERS:
            out[name].add((), spool.get(key, 0))
        out["slicemeter_build_info"].add((scrape.version, SCHEMA_VERSION), 1)
        return list(out.values())


def hami_collectors(stats: ExporterStats, mode: str) -> list[FamilyCollector]:
    if mode not in HAMI_METRICS_MODES:
        raise ValueError(f"hami_metrics must be one of {', '.join(HAMI_METRICS_MODES)}, not {mode!r}")
    return {"monitor": [HamiMonitorCollector(stats)],
            "full": [HamiMonitorCollector(stats), HamiSchedulerCollector(stats)], "off": []}[mode]


class ExporterCollector(Collector):
    """Every family of one node's exporter, in the catalogue's order."""

    def __init__(self, stats: ExporterStats, hami_metrics: str = "monitor", dcgm_metrics: bool = False):
        self.stats = stats
        self.hami_metrics = hami_metrics
        self.tick_collectors: list[FamilyCollector] = [GpuCollector(stats), GpuHealthCollector(stats),
                                                       SliceCollector(stats), *hami_collectors(stats, hami_metrics)]
        if dcgm_metrics:
            self.tick_collectors.append(DcgmCollector(stats))
        self.health = HealthCollector(stats)
        self._lock = threading.Lock()
        self._labels = LabelText()
        self._texts = FamilyTexts()
        self._label_tuples = LabelTuples()
        self._tick_of: BuildResult | None = None
        self._tick_text = b""

    @property
    def collectors(self) -> list[FamilyCollector]:
        return [*self.tick_collectors, self.health]

    def describe(self) -> list[Metric]:
        return [m for c in self.collectors for m in c.describe()]

    def collect(self) -> list[Metric]:
        scrape = self.stats.scrape()
        return [s.to_metric() for c in self.collectors for s in c.samples(scrape)]

    def exposition(self) -> bytes:
        """The /metrics body (text format 0.0.4)."""
        with self._lock:   # concurrent scrapes share the label caches and the Tick's text
            scrape = self.stats.scrape(self._label_tuples)
            if scrape.last is None or scrape.last is not self._tick_of:
                self._tick_text = render((s for c in self.tick_collectors for s in c.samples(scrape)),
                                         self._labels, self._texts).encode()
                self._tick_of = scrape.last
            return self._tick_text + render(self.health.samples(scrape), self._labels).encode()
