-- A batch's owner rows, appended in its transaction after sql/lake/foreign_owners.sql found
-- none: an insert into the table every take-over deletes from, so a take-over committed
-- since this transaction's snapshot fails this commit (docs/upstream.md, DuckLake).
INSERT INTO lake.main.ingest_partition_owners (topic, "partition", epoch, owner, taken_at)
SELECT topic, "partition", epoch, owner, now() FROM batch_owners;
