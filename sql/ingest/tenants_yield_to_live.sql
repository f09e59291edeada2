-- A removed tenant (TenantControlPlane deleted) gives up every identity a live tenant now
-- uses (an address handed to a new plane): the live tenant gets the new hours. Between
-- removed tenants, the one removed last keeps a shared identity.
CREATE OR REPLACE TEMP TABLE identity_owner AS
SELECT i.tenant, cluster_key(i.identity) AS cluster_key, s.removed_at
FROM tenant_identity i LEFT JOIN tenant_sources s USING (tenant);

CREATE OR REPLACE TEMP TABLE yielded AS
SELECT DISTINCT r.tenant, r.cluster_key
FROM identity_owner r JOIN identity_owner o ON o.cluster_key = r.cluster_key AND o.tenant <> r.tenant
WHERE r.removed_at IS NOT NULL
  AND (o.removed_at IS NULL OR o.removed_at > r.removed_at OR (o.removed_at = r.removed_at AND o.tenant > r.tenant));

DELETE FROM tenant_aliases a
WHERE EXISTS (SELECT 1 FROM yielded y WHERE y.tenant = a.tenant AND y.cluster_key = cluster_key(a.alias));

UPDATE tenants t SET api_server = NULL
WHERE EXISTS (SELECT 1 FROM yielded y WHERE y.tenant = t.tenant AND y.cluster_key = cluster_key(t.api_server));

DROP TABLE identity_owner;
DROP TABLE yielded;
