-- Which tenant pays for a slice: a namespace override, else the cluster's tenant from
-- the catalog, else the visible 'unassigned' tenant. A view, so a catalog change
-- re-attributes every stored rollup.
--
-- A cluster identity matches a tenant when its cluster_key equals the key of one of the
-- tenant's identities (api_server, "tcp_namespace/tcp_name", tenant_aliases). The key is
-- slicemeter.common.cluster_key (registered by store.register_functions): scheme, case,
-- IP spelling, a DNS name's trailing dot and the default port 6443 do not tell two
-- identities apart. "namespace/name" identities keep their slash and get no port.
CREATE OR REPLACE TEMP MACRO cluster_key(c) AS slicemeter_cluster_key(c);

CREATE OR REPLACE TEMP VIEW tenant_identity AS
SELECT tenant, api_server AS identity FROM tenants WHERE api_server IS NOT NULL AND api_server <> ''
UNION
SELECT tenant, tcp_namespace || '/' || tcp_name FROM tenants
WHERE tcp_namespace IS NOT NULL AND tcp_name IS NOT NULL
UNION
SELECT tenant, alias FROM tenant_aliases;

CREATE OR REPLACE TEMP VIEW tenant_cluster_key AS
SELECT DISTINCT cluster_key(identity) AS cluster_key, tenant FROM tenant_identity;

-- The cluster strings of the stored rollups (a readers' file reads them from its day
-- figures: sql/views/reader_days.sql).
CREATE OR REPLACE TEMP MACRO stored_clusters() AS TABLE
SELECT cluster FROM slice_hour UNION SELECT cluster FROM gpu_hour;

-- Every cluster string the store knows (Ticks' and the catalog's own) and its key: the
-- regular expressions run once per distinct string, not once per stored row.
CREATE OR REPLACE TEMP VIEW known_cluster AS
SELECT cluster, cluster_key(cluster) AS cluster_key FROM (
    SELECT cluster FROM stored_clusters()
    UNION SELECT identity FROM tenant_identity UNION SELECT cluster FROM tenant_namespace_overrides
);

-- store_catalog refuses a catalog where one key belongs to two tenants.
CREATE OR REPLACE TEMP VIEW cluster_tenant AS
SELECT k.cluster, any_value(t.tenant) AS tenant
FROM known_cluster k JOIN tenant_cluster_key t USING (cluster_key)
GROUP BY k.cluster;

CREATE OR REPLACE TEMP VIEW cluster_namespace_override AS
SELECT k.cluster, o.namespace, any_value(o.tenant) AS tenant
FROM known_cluster k JOIN tenant_namespace_overrides o ON cluster_key(o.cluster) = k.cluster_key
GROUP BY k.cluster, o.namespace;

CREATE OR REPLACE TEMP VIEW slice_hour_tenant AS
SELECT
    coalesce(o.tenant, ct.tenant, 'unassigned') AS tenant,
    s.*
FROM slice_hour s
LEFT JOIN cluster_namespace_override o ON o.cluster = s.cluster AND o.namespace = s.namespace
LEFT JOIN cluster_tenant ct ON ct.cluster = s.cluster;

CREATE OR REPLACE TEMP VIEW gpu_hour_tenant AS
SELECT coalesce(ct.tenant, 'unassigned') AS tenant, g.*
FROM gpu_hour g
LEFT JOIN cluster_tenant ct ON ct.cluster = g.cluster;
