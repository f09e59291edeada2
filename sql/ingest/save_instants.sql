-- A batch's instants (batch_instants: node_id, ts_ms, one row per instant of each message)
-- refused if one repeats another of the batch or one stored (ingest_instants), then stored:
-- a Tick is billed once however late, under whatever key or partition it comes back. Runs in
-- the batch's transaction (file store and lake alike), so no batch stored before it, by this
-- worker or a committed one of another, escapes it. The error rejects the batch; the consumer
-- reads it again a message at a time and dead-letters the repeat ("duplicate: ...",
-- ingest/trust.py). $lo, $hi: the batch's earliest and latest instant, which lets DuckDB skip
-- every row group of other times.
SELECT error(printf('duplicate: node id %d reported instant %d (ts_ms) twice', node_id, ts_ms))
FROM (SELECT node_id, ts_ms FROM batch_instants GROUP BY ALL HAVING count(*) > 1
      UNION ALL
      SELECT node_id, ts_ms FROM batch_instants
      SEMI JOIN (SELECT node_id, ts_ms FROM ingest_instants WHERE ts_ms BETWEEN $lo AND $hi) USING (node_id, ts_ms))
LIMIT 1;
INSERT INTO ingest_instants SELECT node_id, ts_ms FROM batch_instants;
