INSERT OR REPLACE INTO tenant_namespace_overrides (cluster, namespace, tenant) VALUES (?, ?, ?)
