INSERT INTO dead_letters (received_at, topic, "partition", "offset", key, payload, error, payload_bytes, payload_sha256)
SELECT received_at, topic, "partition", "offset", key, payload, error, payload_bytes, payload_sha256
FROM batch_dead_letters;
