-- A removed tenant (TenantControlPlane deleted) gives up every identity a live tenant now
-- uses (an address handed to a new plane): the live tenant gets the new hours.
CREATE OR REPLACE TEMP TABLE live_key AS
SELECT DISTINCT cluster_key(i.identity) AS cluster_key
FROM tenant_identity i LEFT JOIN tenant_sources s USING (tenant)
WHERE s.removed_at IS NULL;

DELETE FROM tenant_aliases
WHERE tenant IN (SELECT tenant FROM tenant_sources WHERE removed_at IS NOT NULL)
  AND cluster_key(alias) IN (SELECT cluster_key FROM live_key);

UPDATE tenants SET api_server = NULL
WHERE tenant IN (SELECT tenant FROM tenant_sources WHERE removed_at IS NOT NULL)
  AND cluster_key(api_server) IN (SELECT cluster_key FROM live_key);

DROP TABLE live_key;
