-- GPUs and nodes first bound to a cluster (ingest/trust.py); the lake has no unique keys,
-- so a binding already stored is left out here (sql/ingest/save_bindings.sql elsewhere).
INSERT INTO ingest_bindings (kind, name, cluster, bound_at)
SELECT kind, name, cluster, now() FROM batch_bindings b
WHERE NOT EXISTS (SELECT 1 FROM ingest_bindings s WHERE s.kind = b.kind AND s.name = b.name);
