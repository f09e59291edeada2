"""Kafka -> DuckDB: the consumer, the batch writer, the tenant catalog and what ingest trusts."""
