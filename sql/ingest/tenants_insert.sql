-- The catalog's rows from the registered tables catalog_tenants, catalog_aliases,
-- catalog_budgets and catalog_overrides (ingest/tenants.py store_catalog), after
-- tenants_clear.sql in the same transaction. Plain inserts of rows made unique in Python:
-- a DuckLake table has no keys for INSERT OR IGNORE / OR REPLACE (docs/upstream.md).
INSERT INTO tenants (tenant, display_name, tcp_namespace, tcp_name, api_server, cost_center)
SELECT tenant, display_name, tcp_namespace, tcp_name, api_server, cost_center FROM catalog_tenants;
INSERT INTO tenant_sources (tenant, source, kubernetes_version, admin_kubeconfig_secret, removed_at)
SELECT tenant, source, kubernetes_version, admin_kubeconfig_secret, removed_at FROM catalog_tenants;
INSERT INTO tenant_budgets (tenant, monthly_budget) SELECT tenant, monthly_budget FROM catalog_budgets;
INSERT INTO tenant_aliases (tenant, alias) SELECT tenant, alias FROM catalog_aliases;
INSERT INTO tenant_namespace_overrides (cluster, namespace, tenant) SELECT cluster, namespace, tenant FROM catalog_overrides;
