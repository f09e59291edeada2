-- A stored offset that does not fit the broker's log moves to where ingest resumes, and
-- the event is recorded (ingest/consumer.py, docs/ingest.md "When the log does not fit").
-- Parameters: topic, partition, resume, stored, log_start, high_watermark, reason.
INSERT INTO ingest_offset_events (detected_at, topic, "partition", stored, log_start, high_watermark, reason, resumed_at)
VALUES (now(), $topic, $partition, $stored, $log_start, $high_watermark, $reason, $resume);
INSERT INTO ingest_offsets (topic, "partition", next_offset, last_digest) VALUES ($topic, $partition, $resume, NULL)
ON CONFLICT (topic, "partition") DO UPDATE SET next_offset = excluded.next_offset, last_digest = NULL;
