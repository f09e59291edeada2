-- An operator moves a GPU UUID or node to another cluster (ingest/bindings_cli.py).
-- Parameters: kind, name, cluster. An update, else an insert: the same statements on a file
-- and a lake (whose tables have no keys for ON CONFLICT).
UPDATE ingest_bindings SET moved_from = cluster, cluster = $cluster, bound_at = now()
WHERE kind = $kind AND name = $name;
INSERT INTO ingest_bindings (kind, name, cluster, bound_at)
SELECT $kind, $name, $cluster, now()
WHERE NOT EXISTS (SELECT 1 FROM ingest_bindings WHERE kind = $kind AND name = $name);
