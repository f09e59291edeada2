-- Offsets consumed by this batch; same transaction as the rows (exactly once).
INSERT INTO ingest_offsets (topic, "partition", next_offset)
SELECT topic, "partition", next_offset FROM batch_offsets
ON CONFLICT (topic, "partition") DO UPDATE SET next_offset = greatest(ingest_offsets.next_offset, excluded.next_offset);
