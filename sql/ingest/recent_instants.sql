-- The instants each node reported within $w ms of its latest GPU row (ingest/trust.py
-- RecentInstants, rebuilt at start and after a rejected batch): node name, ts_ms.
WITH latest AS (SELECT node_id, max(last_seen_ms) AS latest FROM gpu_inventory_latest GROUP BY node_id)
SELECT s.value, i.ts_ms FROM ingest_instants i JOIN latest l USING (node_id)
JOIN ingest_strings s ON s.id = i.node_id
WHERE i.ts_ms >= (SELECT min(latest) FROM latest) - $w AND i.ts_ms >= l.latest - $w
GROUP BY ALL;
