INSERT INTO tenant_sources (tenant, source, kubernetes_version, control_plane_endpoint, admin_kubeconfig_secret, removed_at)
VALUES (?, ?, ?, ?, ?, ?)
