"""Prometheus metrics of the ingest process (docs/metrics.md, "Ingest")."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server


class IngestMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        # prometheus_client appends _total to counters itself.
        self.samples = Counter("slicemeter_ingest_samples", "Samples (GPU and slice rows) stored", registry=r)
        self.dead_letters = Counter("slicemeter_ingest_dead_letters", "Messages sent to dead_letters", registry=r)
        self.lag = Gauge("slicemeter_ingest_lag_messages", "Messages behind the partition's high watermark",
                         ["partition"], registry=r)
        self.batch_seconds = Histogram("slicemeter_ingest_batch_seconds", "Time to write one batch transaction",
                                       buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)

    def serve(self, port: int, addr: str = "0.0.0.0"):
        return start_http_server(port, addr=addr, registry=self.registry)
