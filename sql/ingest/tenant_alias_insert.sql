INSERT OR IGNORE INTO tenant_aliases (tenant, alias) VALUES (?, ?)
