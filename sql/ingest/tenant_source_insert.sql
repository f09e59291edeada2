INSERT INTO tenant_sources (tenant, source, kubernetes_version, admin_kubeconfig_secret, removed_at)
VALUES (?, ?, ?, ?, ?)
