-- A tenant's monthly budget in the price catalog's currency, from the tenant catalog
-- (docs/live-bill.md). Exact: the catalog's decimal text, at most 6 decimals.
CREATE TABLE IF NOT EXISTS tenant_budgets (
    tenant         VARCHAR PRIMARY KEY,
    monthly_budget DECIMAL(38, 6) NOT NULL
);
