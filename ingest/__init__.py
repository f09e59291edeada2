"""Central side: Kafka -> DuckDB, rollups, tenant catalog, chargeback and exports."""
