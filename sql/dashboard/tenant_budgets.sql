-- Each budgeted tenant's monthly budget (the tenant catalog's monthly_budget), as exact text:
-- a DECIMAL column would reach the page as a float.
SELECT tenant, monthly_budget::VARCHAR AS monthly_budget FROM tenant_budgets ORDER BY tenant
