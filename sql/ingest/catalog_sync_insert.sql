DELETE FROM catalog_syncs WHERE synced_at < CAST(now() AT TIME ZONE 'UTC' AS TIMESTAMP) - INTERVAL 30 DAY;
INSERT INTO catalog_syncs (synced_at, source, ok, tenants, aliases, message) VALUES (CAST(now() AT TIME ZONE 'UTC' AS TIMESTAMP), ?, ?, ?, ?, ?);
