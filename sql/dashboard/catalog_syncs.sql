-- The latest catalog refresh per source, and the latest that succeeded.
SELECT source,
       max(synced_at)                           AS last_attempt,
       max(synced_at) FILTER (WHERE ok)         AS last_synced,
       arg_max(ok, synced_at)                   AS last_ok,
       arg_max(tenants, synced_at)              AS tenants,
       arg_max(aliases, synced_at)              AS aliases,
       arg_max(message, synced_at)              AS message
FROM catalog_syncs
GROUP BY source
ORDER BY source;
