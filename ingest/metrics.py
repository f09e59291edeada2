"""Prometheus metrics of the ingest process (docs/metrics.md, "Ingest")."""
from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from slicemeter.chargeback.dividend import DIVIDEND_METRICS
from slicemeter.chargeback.live_bill import BUDGET_METRICS, LIVE_BILL_METRICS
from slicemeter.headline import Family, Samples
from slicemeter.rightsizing.plan import RECOMMEND_METRICS

class Headline:
    """Collector of the latest figures computed off the request path (slicemeter/headline.py:
    name -> Family in `spec`). Serves nothing until the first update, so a process without
    --recommend-interval, or one still waiting for its first snapshot, never shows a
    made-up 0."""

    def __init__(self, spec: dict[str, Family]):
        self.spec = spec
        self._lock = threading.Lock()
        self._samples: dict[str, list[tuple[dict[str, str], float]]] = {}

    def update(self, samples: Samples) -> None:
        unknown = set(samples) - set(self.spec)
        if unknown:
            raise ValueError(f"not one of this collector's metrics: {sorted(unknown)}")
        with self._lock:
            self._samples = {name: list(values) for name, values in samples.items()}

    def _families(self, samples):
        for name, spec in self.spec.items():
            family = GaugeMetricFamily(name, spec.help, labels=list(spec.labels))
            for label_values, value in samples.get(name, []):
                family.add_metric([label_values[k] for k in spec.labels], value)
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


class LiveBillHeadline(Headline):
    def __init__(self):
        super().__init__({**LIVE_BILL_METRICS, **BUDGET_METRICS})


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
        self.fenced = Counter(
            "slicemeter_ingest_fenced_partitions", "Partitions another worker took while this one held them, "
            "on a shared lake: the batches read from them and not stored were dropped (docs/lake.md, Fencing)",
            registry=r)
        self.lag = Gauge("slicemeter_ingest_lag_messages", "Messages behind the partition's high watermark",
                         ["partition"], registry=r)
        self.batch_seconds = Histogram("slicemeter_ingest_batch_seconds", "Time to write one batch transaction",
                                       buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.recommend = RecommendHeadline()  # filled by slicemeter.ingest.headlines
        r.register(self.recommend)
        self.dividend = DividendHeadline()    # filled by slicemeter.ingest.headlines too
        r.register(self.dividend)
        self.live_bill = LiveBillHeadline()  # filled by slicemeter.ingest.headlines.LiveBillRefresher
        r.register(self.live_bill)

    def serve(self, port: int, addr: str = "127.0.0.1"):
        return start_http_server(port, addr=addr, registry=self.registry)
