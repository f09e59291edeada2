-- Each budgeted tenant's monthly budget (the tenant catalog's monthly_budget).
SELECT tenant, monthly_budget FROM tenant_budgets ORDER BY tenant
