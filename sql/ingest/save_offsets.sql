-- Offsets consumed by this batch; same transaction as the rows (exactly once). The digest
-- of the record just below the offset identifies the log it belongs to (resume check).
INSERT INTO ingest_offsets (topic, "partition", next_offset, last_digest)
SELECT topic, "partition", next_offset, last_digest FROM batch_offsets
ON CONFLICT (topic, "partition") DO UPDATE SET
    last_digest = CASE WHEN excluded.next_offset >= ingest_offsets.next_offset
                       THEN excluded.last_digest ELSE ingest_offsets.last_digest END,
    next_offset = greatest(ingest_offsets.next_offset, excluded.next_offset);
