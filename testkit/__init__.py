"""What the tests and benchmarks share: generated Ticks and months, HAMi-core region bytes
written from its struct definitions, recorded Kubernetes APIs, and the ingest reference."""
