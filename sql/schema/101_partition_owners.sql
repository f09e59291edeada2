-- Who stores a Kafka partition's batches into a store several ingest workers share (a
-- DuckLake, store/lake.py; docs/lake.md, Fencing). A worker takes a partition when it is
-- given it (sql/lake/take_partitions.sql: a new epoch, one above the last); each batch
-- checks in its own transaction that the partition's latest row is still its own and
-- appends one, so a worker another one took its partitions from stores nothing more.
-- The row of topic '' is the fence every take-over deletes and puts back, so two
-- take-overs, or a take-over and a batch, never both commit. A file store leaves it
-- empty: one process writes a DuckDB file.
CREATE TABLE IF NOT EXISTS ingest_partition_owners (
    topic       VARCHAR   NOT NULL,
    "partition" INTEGER   NOT NULL,
    epoch       BIGINT    NOT NULL,
    owner       VARCHAR   NOT NULL,   -- host:pid:random of the worker
    taken_at    TIMESTAMP NOT NULL
);
