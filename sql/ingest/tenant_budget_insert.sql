INSERT INTO tenant_budgets (tenant, monthly_budget) VALUES (?, ?)
