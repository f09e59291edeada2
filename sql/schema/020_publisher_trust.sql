-- What ingest trusts a message to speak for (ingest/trust.py, docs/security.md).
-- A GPU UUID or a node belongs to the tenant cluster that first reported it; a message
-- from another cluster naming it is a dead letter until an operator moves the binding
-- (`slicemeter bindings move`).
CREATE TABLE IF NOT EXISTS ingest_bindings (
    kind     VARCHAR NOT NULL,            -- 'gpu' (a GPU UUID) or 'node'
    name     VARCHAR NOT NULL,
    cluster  VARCHAR NOT NULL,
    bound_at TIMESTAMP NOT NULL,
    moved_from VARCHAR,                   -- the cluster before an operator's move
    PRIMARY KEY (kind, name)
);

-- A store that ingested before bindings existed: what it holds binds as last seen.
INSERT OR IGNORE INTO ingest_bindings (kind, name, cluster, bound_at)
SELECT 'gpu', u.value, c.value, now() FROM gpu_inventory i
JOIN ingest_strings u ON u.id = i.gpu_uuid_id JOIN ingest_strings c ON c.id = i.cluster_id;
INSERT OR IGNORE INTO ingest_bindings (kind, name, cluster, bound_at)
SELECT 'node', n.value, arg_max(c.value, i.last_seen_ms), now() FROM gpu_inventory i
JOIN ingest_strings n ON n.id = i.node_id JOIN ingest_strings c ON c.id = i.cluster_id GROUP BY n.value;

-- The Kafka log a stored offset belongs to: a digest of the last record consumed below it
-- (ingest/consumer.py checks it on resume: a replaced broker's log has other records there).
ALTER TABLE ingest_offsets ADD COLUMN IF NOT EXISTS last_digest BLOB;

-- Every time a stored offset did not fit the broker's log, and what ingest did about it.
CREATE TABLE IF NOT EXISTS ingest_offset_events (
    detected_at TIMESTAMP NOT NULL,
    topic       VARCHAR NOT NULL,
    "partition" INTEGER NOT NULL,
    stored      BIGINT,
    log_start   BIGINT,
    high_watermark BIGINT,
    reason      VARCHAR NOT NULL,
    resumed_at  BIGINT NOT NULL
);
