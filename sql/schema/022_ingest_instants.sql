-- Every instant each node reported (one row per node and instant, whichever of a Tick's
-- tables carried it), kept as long as the timestamp window accepts a sample of that age:
-- a Tick that comes back later, under another Kafka key or on another partition, is a
-- duplicate (sql/ingest/save_instants.sql, ingest/trust.py, docs/security.md). Written with
-- its batch, pruned with the raw retention (sql/ingest/retention.sql). No index: an ART over
-- a row per node per Tick for the retention would break ingest's memory bound; rows arrive
-- in about time order, so a lookup by a time range reads only the row groups of that range.
CREATE TABLE IF NOT EXISTS ingest_instants (
    node_id INTEGER NOT NULL,
    ts_ms   BIGINT  NOT NULL
);

-- A store that ingested before this table: the instants of the samples it keeps.
INSERT INTO ingest_instants
SELECT DISTINCT node_id, ts_ms FROM (
    SELECT node_id, ts_ms FROM raw_gpu_rows UNION ALL
    SELECT node_id, ts_ms FROM raw_slice_rows UNION ALL
    SELECT node_id, ts_ms FROM raw_slice_tail);
