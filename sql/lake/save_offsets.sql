-- The next offset of every partition the batch consumed, appended (read back through the
-- ingest_offsets view, sql/lake/views.sql); in the batch's transaction (exactly once).
INSERT INTO lake.main.ingest_offsets (topic, "partition", next_offset, last_digest)
SELECT topic, "partition", next_offset, last_digest FROM batch_offsets;
