INSERT INTO tenants (tenant, display_name, tcp_namespace, tcp_name, api_server, cost_center) VALUES (?, ?, ?, ?, ?, ?)
