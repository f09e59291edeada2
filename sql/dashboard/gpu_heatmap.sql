-- Allocation and usage of each physical GPU per time bucket ('hour' or 'day'), for one
-- page of GPUs: $limit GPUs from $offset in gpu_list's order (node, GPU), so the chart
-- stays the size of a screen whatever the fleet.
WITH page AS (
    SELECT node, gpu_uuid FROM (SELECT DISTINCT node, gpu_uuid FROM dash_gpu_hour WHERE hour >= $start AND hour < $end)
    ORDER BY node, gpu_uuid LIMIT $limit OFFSET $offset
)
SELECT
    date_trunc($bucket, hour)                       AS bucket,
    date_trunc($bucket, hour) + CASE WHEN $bucket = 'day' THEN INTERVAL 1 DAY ELSE INTERVAL 1 HOUR END
                                                    AS bucket_end,   -- rect's right edge
    node || ' · ' || substr(gpu_uuid, 5, 8)        AS gpu,
    gpu_uuid,
    any_value(model)                                AS model,
    sum(alloc_s) / nullif(sum(metered_s), 0)        AS allocation,
    sum(sm_util_s) / nullif(sum(metered_s), 0)      AS utilization,
    sum(metered_s) / 3600                           AS metered_h
FROM dash_gpu_hour SEMI JOIN page USING (node, gpu_uuid)
WHERE hour >= $start AND hour < $end
GROUP BY ALL ORDER BY gpu, bucket;
