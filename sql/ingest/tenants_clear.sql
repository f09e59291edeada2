DELETE FROM tenant_namespace_overrides;
DELETE FROM tenant_aliases;
DELETE FROM tenant_sources;
DELETE FROM tenant_budgets;
DELETE FROM tenants;
