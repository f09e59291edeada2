-- GPU UUIDs and nodes first reported in this batch bind to their cluster (ingest/trust.py);
-- same transaction as the rows. Input: batch_bindings (kind, name, cluster).
INSERT OR IGNORE INTO ingest_bindings (kind, name, cluster, bound_at)
SELECT kind, name, cluster, now() FROM batch_bindings;
