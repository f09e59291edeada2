-- Cluster keys that more than one tenant claims, with the identities that collide.
SELECT cluster_key, list(DISTINCT tenant ORDER BY tenant) AS tenants,
       list(DISTINCT tenant || ': ' || identity ORDER BY tenant || ': ' || identity) AS identities
FROM (SELECT tenant, identity, cluster_key(identity) AS cluster_key FROM tenant_identity)
GROUP BY cluster_key
HAVING count(DISTINCT tenant) > 1
ORDER BY cluster_key
