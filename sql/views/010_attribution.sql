-- Which tenant pays for a slice: a namespace override, else the cluster's tenant from
-- the catalog (by API server URL or Kamaji "namespace/name"), else the visible
-- 'unassigned' tenant. A view, so a catalog change re-attributes every stored rollup.
CREATE OR REPLACE TEMP VIEW cluster_tenant AS
SELECT api_server AS cluster, tenant FROM tenants WHERE api_server IS NOT NULL
UNION
SELECT tcp_namespace || '/' || tcp_name AS cluster, tenant FROM tenants
WHERE tcp_namespace IS NOT NULL AND tcp_name IS NOT NULL;

CREATE OR REPLACE TEMP VIEW slice_hour_tenant AS
SELECT
    coalesce(o.tenant, ct.tenant, 'unassigned') AS tenant,
    s.*
FROM slice_hour s
LEFT JOIN tenant_namespace_overrides o ON o.cluster = s.cluster AND o.namespace = s.namespace
LEFT JOIN (SELECT cluster, any_value(tenant) AS tenant FROM cluster_tenant GROUP BY cluster) ct
       ON ct.cluster = s.cluster;

CREATE OR REPLACE TEMP VIEW gpu_hour_tenant AS
SELECT coalesce(ct.tenant, 'unassigned') AS tenant, g.*
FROM gpu_hour g
LEFT JOIN (SELECT cluster, any_value(tenant) AS tenant FROM cluster_tenant GROUP BY cluster) ct
       ON ct.cluster = g.cluster;
