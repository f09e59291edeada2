-- Which of a message's instants ($instants, its earliest $lo and latest $hi) its node
-- ($node) has stored already (ingest/trust.py StoredInstants): the first three.
SELECT i.ts_ms FROM ingest_instants i JOIN ingest_strings s ON s.id = i.node_id
WHERE s.value = $node AND i.ts_ms BETWEEN $lo AND $hi AND list_contains($instants, i.ts_ms)
ORDER BY 1 LIMIT 3;
