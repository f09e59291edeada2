DELETE FROM tenant_namespace_overrides;
DELETE FROM tenants;
