-- One tenant's view of the store, for a dashboard served to that tenant ($tenant).
-- TEMP views named like the store's tables come first in DuckDB's search path, so every
-- query, view and macro that reads gpu_hour, slice_hour or the catalog on this connection
-- reads that tenant's rows only. `{store}` is the store's own catalog (the unfiltered
-- tables); dashboard/data.py fills it in and hides every other table of the store.

CREATE OR REPLACE TEMP TABLE scope_tenant AS SELECT $tenant::VARCHAR AS tenant;

-- Cluster -> tenant over the whole catalog, taken before the catalog is narrowed below,
-- so that a cluster resolves to the same tenant as in an unscoped view (010_attribution).
CREATE OR REPLACE TEMP TABLE scope_cluster_tenant AS
SELECT cluster, any_value(tenant) AS tenant FROM cluster_tenant GROUP BY cluster;

CREATE OR REPLACE TEMP TABLE scope_namespace_override AS
SELECT cluster, namespace, tenant FROM cluster_namespace_override;

-- A node's GPUs belong to its cluster's tenant.
CREATE OR REPLACE TEMP VIEW gpu_hour AS
SELECT g.* FROM {store}.main.gpu_hour g
JOIN scope_cluster_tenant ct ON ct.cluster = g.cluster
WHERE ct.tenant = (SELECT tenant FROM scope_tenant);

-- A slice belongs to the tenant that pays for it: the attribution rule of
-- views/010_attribution.sql (namespace override, else the cluster's tenant).
CREATE OR REPLACE TEMP VIEW slice_hour AS
SELECT s.* FROM {store}.main.slice_hour s
LEFT JOIN scope_namespace_override o ON o.cluster = s.cluster AND o.namespace = s.namespace
LEFT JOIN scope_cluster_tenant ct ON ct.cluster = s.cluster
WHERE coalesce(o.tenant, ct.tenant, 'unassigned') = (SELECT tenant FROM scope_tenant);

-- The readers' day figures (sql/schema/090_reader_days.sql), by the same rules.
CREATE OR REPLACE TEMP VIEW reader_gpu_day AS
SELECT g.* FROM {store}.main.reader_gpu_day g
JOIN scope_cluster_tenant ct ON ct.cluster = g.cluster
WHERE ct.tenant = (SELECT tenant FROM scope_tenant);

CREATE OR REPLACE TEMP VIEW reader_cluster_hour AS
SELECT c.* FROM {store}.main.reader_cluster_hour c
JOIN scope_cluster_tenant ct ON ct.cluster = c.cluster
WHERE ct.tenant = (SELECT tenant FROM scope_tenant);

-- A slice's GPU is named only where that GPU is the tenant's (as the scoped gpu_hour has it).
CREATE OR REPLACE TEMP VIEW reader_slice_day AS
SELECT s.* REPLACE (CASE WHEN gt.tenant = (SELECT tenant FROM scope_tenant) THEN s.gpu_cluster END AS gpu_cluster,
                    CASE WHEN gt.tenant = (SELECT tenant FROM scope_tenant) THEN s.model END AS model)
FROM {store}.main.reader_slice_day s
LEFT JOIN scope_namespace_override o ON o.cluster = s.cluster AND o.namespace = s.namespace
LEFT JOIN scope_cluster_tenant ct ON ct.cluster = s.cluster
LEFT JOIN scope_cluster_tenant gt ON gt.cluster = s.gpu_cluster
WHERE coalesce(o.tenant, ct.tenant, 'unassigned') = (SELECT tenant FROM scope_tenant);

CREATE OR REPLACE TEMP VIEW reader_slice_sizing_day AS
SELECT s.* FROM {store}.main.reader_slice_sizing_day s
LEFT JOIN scope_namespace_override o ON o.cluster = s.cluster AND o.namespace = s.namespace
LEFT JOIN scope_cluster_tenant ct ON ct.cluster = s.cluster
WHERE coalesce(o.tenant, ct.tenant, 'unassigned') = (SELECT tenant FROM scope_tenant);

-- A GPU's day figures count the slices on it; the tenant's view counts its own slices only
-- (another tenant's namespace may sit on its GPUs), so they are computed from the scoped
-- hours here, not read from a readers' file (sql/views/310_days.sql).
CREATE OR REPLACE TEMP MACRO gpu_days(d_start, d_end) AS TABLE
SELECT * FROM gpu_days_of_hours(d_start, d_end);

CREATE OR REPLACE TEMP MACRO cluster_hours(d_start, d_end) AS TABLE
SELECT * FROM cluster_hours_of_hours(d_start, d_end);

-- Health events too: a GPU's ECC readings before it came to the tenant are not the tenant's.
CREATE OR REPLACE TEMP MACRO gpu_health_noted(h_start, h_end) AS TABLE
SELECT * FROM gpu_health_noted_of_hours(h_start, h_end);

CREATE OR REPLACE TEMP MACRO slices_on_noted(h_start, h_end) AS TABLE
SELECT * FROM slices_on_noted_of_hours(h_start, h_end);

CREATE OR REPLACE TEMP VIEW tenants AS
SELECT * FROM {store}.main.tenants WHERE tenant = (SELECT tenant FROM scope_tenant);

CREATE OR REPLACE TEMP VIEW tenant_namespace_overrides AS
SELECT * FROM {store}.main.tenant_namespace_overrides WHERE tenant = (SELECT tenant FROM scope_tenant);

CREATE OR REPLACE TEMP VIEW tenant_budgets AS
SELECT * FROM {store}.main.tenant_budgets WHERE tenant = (SELECT tenant FROM scope_tenant);
