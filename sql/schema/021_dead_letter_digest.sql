-- A dead letter keeps a bounded prefix of its payload (ingest/writer.py dead_letter) with
-- the whole payload's length and SHA-256: enough to find the record again and compare,
-- while a flood of big junk records cannot grow a batch's transaction past its memory.
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS payload_bytes BIGINT;
ALTER TABLE dead_letters ADD COLUMN IF NOT EXISTS payload_sha256 BLOB;
