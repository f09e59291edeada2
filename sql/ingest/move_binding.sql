-- An operator moves a GPU UUID or node to another cluster (ingest/bindings_cli.py).
-- Parameters: kind, name, cluster.
INSERT INTO ingest_bindings (kind, name, cluster, bound_at) VALUES ($kind, $name, $cluster, now())
ON CONFLICT (kind, name) DO UPDATE SET moved_from = ingest_bindings.cluster, cluster = excluded.cluster,
                                       bound_at = excluded.bound_at;
