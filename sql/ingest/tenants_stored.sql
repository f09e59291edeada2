SELECT t.tenant, t.display_name, t.tcp_namespace, t.tcp_name, t.api_server, t.cost_center,
       s.source, s.kubernetes_version, s.admin_kubeconfig_secret, s.removed_at,
       (SELECT list(a.alias ORDER BY a.alias) FROM tenant_aliases a WHERE a.tenant = t.tenant) AS aliases,
       (SELECT b.monthly_budget FROM tenant_budgets b WHERE b.tenant = t.tenant) AS monthly_budget
FROM tenants t LEFT JOIN tenant_sources s USING (tenant)
ORDER BY t.tenant
