INSERT INTO dead_letters (received_at, topic, "partition", "offset", key, payload, error)
SELECT received_at, topic, "partition", "offset", key, payload, error FROM batch_dead_letters;
