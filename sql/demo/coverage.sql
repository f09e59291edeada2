-- How far every node's history reaches in a store: nodes seen and the earliest of their
-- latest metered hours (the demo's backfill progress).
SELECT count(*) AS nodes, min(latest) AS latest
FROM (SELECT node, max(hour) AS latest FROM gpu_hour WHERE hour >= $start GROUP BY node);
