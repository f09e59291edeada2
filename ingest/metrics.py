"""Prometheus metrics of the ingest process (docs/metrics.md, "Ingest")."""
from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

# The right-sizing plan's headline figures (slicemeter.rightsizing.plan.headline_metrics): name -> (help, labels)
RECOMMEND_METRICS = {
    "slicemeter_recommend_freeable_gpus": ("GPUs the current month's consolidation plan frees", ()),
    "slicemeter_recommend_monthly_saving": ("Monthly saving of the current month's plan at catalog prices",
                                            ("currency",)),
}

# The sharing dividend of the current and the previous month (slicemeter.chargeback.dividend.dividend_metrics,
# docs/dividend.md); scope is "fleet" or a tenant (the GPUs of its cluster), month YYYY-MM.
DIVIDEND_METRICS = {
    "slicemeter_dividend_sharing_factor": (
        "GPUs the month's containers would need as whole GPUs, per GPU in use (N x the users)", ("scope", "month")),
    "slicemeter_dividend_containers_per_gpu": ("Container slices served per physical GPU metered", ("scope", "month")),
    "slicemeter_dividend_gpus_in_use": ("GPUs holding at least one container slice, month average", ("scope", "month")),
    "slicemeter_dividend_gpus_needed": ("GPUs the same containers would hold as whole GPUs, month average",
                                        ("scope", "month")),
    "slicemeter_dividend_gpus_avoided": ("Whole-GPU need minus GPUs in use, month average", ("scope", "month")),
    "slicemeter_dividend_utilization_ratio": ("NVML SM busy time over metered GPU time (0-1)", ("scope", "month")),
    "slicemeter_dividend_monthly_cost_avoided": ("The avoided GPUs at catalog prices over the whole month",
                                                 ("scope", "month", "currency")),
    "slicemeter_dividend_energy_avoided_kwh": ("The avoided GPU-hours at each model's measured idle power",
                                               ("scope", "month")),
    "slicemeter_dividend_co2e_avoided_grams": ("The avoided energy at the catalog's carbon intensity",
                                               ("scope", "month")),
}


class Headline:
    """Collector of the latest figures computed off the request path (name -> (help,
    labels) in `spec`). Serves nothing until the first update, so a process without
    --recommend-interval, or one still waiting for its first snapshot, never shows a
    made-up 0."""

    def __init__(self, spec: dict[str, tuple[str, tuple[str, ...]]]):
        self.spec = spec
        self._lock = threading.Lock()
        self._samples: dict[str, list[tuple[dict[str, str], float]]] = {}

    def update(self, samples: dict[str, list[tuple[dict[str, str], float]]]) -> None:
        unknown = set(samples) - set(self.spec)
        if unknown:
            raise ValueError(f"not one of this collector's metrics: {sorted(unknown)}")
        with self._lock:
            self._samples = {name: list(values) for name, values in samples.items()}

    def _families(self, samples):
        for name, (help_text, labels) in self.spec.items():
            family = GaugeMetricFamily(name, help_text, labels=list(labels))
            for label_values, value in samples.get(name, []):
                family.add_metric([label_values[k] for k in labels], value)
            yield family

    def describe(self):
        return list(self._families({}))

    def collect(self):
        with self._lock:
            samples = self._samples
        if samples:
            yield from self._families(samples)


class RecommendHeadline(Headline):
    def __init__(self):
        super().__init__(RECOMMEND_METRICS)


class DividendHeadline(Headline):
    def __init__(self):
        super().__init__(DIVIDEND_METRICS)


class IngestMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # prometheus_client appends _total to counters itself.
        self.samples = Counter("slicemeter_ingest_samples", "Samples (GPU and slice rows) stored", registry=r)
        self.dead_letters = Counter("slicemeter_ingest_dead_letters", "Messages sent to dead_letters", registry=r)
        self.offset_resets = Counter(
            "slicemeter_ingest_offset_resets", "Stored offsets that did not fit the broker's log "
            "(log_replaced: read again from the log start; records_gone: deleted before they were read)",
            ["partition", "reason"], registry=r)
        self.lag = Gauge("slicemeter_ingest_lag_messages", "Messages behind the partition's high watermark",
                         ["partition"], registry=r)
        self.batch_seconds = Histogram("slicemeter_ingest_batch_seconds", "Time to write one batch transaction",
                                       buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.recommend = RecommendHeadline()  # filled by slicemeter.rightsizing.refresher
        r.register(self.recommend)
        self.dividend = DividendHeadline()    # filled by slicemeter.rightsizing.refresher too
        r.register(self.dividend)

    def serve(self, port: int, addr: str = "127.0.0.1"):
        return start_http_server(port, addr=addr, registry=self.registry)
