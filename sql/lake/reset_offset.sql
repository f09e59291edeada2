-- A stored offset the broker's log does not hold (ingest/consumer.py _log_mismatch): the
-- event, and the partition's offset restarted at $resume (the latest commit's row wins:
-- sql/lake/views.sql).
INSERT INTO ingest_offset_events (detected_at, topic, "partition", stored, log_start, high_watermark, reason, resumed_at)
VALUES (now(), $topic, $partition, $stored, $log_start, $high_watermark, $reason, $resume);
INSERT INTO lake.main.ingest_offsets (topic, "partition", next_offset, last_digest) VALUES ($topic, $partition, $resume, NULL);
