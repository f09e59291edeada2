-- Allocation and usage of each physical GPU per time bucket ('hour' or 'day'), for one
-- page of GPUs: the UUIDs in $gpus (the page's rows of gpu_table), so the chart stays the
-- size of a screen whatever the fleet. Days from the day figures
-- (sql/views/310_days.sql); the part of the other bucket reads nothing.
WITH page AS (
    SELECT unnest($gpus) AS gpu_uuid
), buckets AS (
    SELECT day AS bucket, day + INTERVAL 1 DAY AS bucket_end, node, gpu_uuid, model, alloc_s, sm_util_s, metered_s
    FROM gpu_days($start, $end) WHERE $bucket = 'day'
    UNION ALL
    SELECT hour, hour + INTERVAL 1 HOUR, node, gpu_uuid, model, alloc_s, sm_util_s, metered_s
    FROM dash_gpu_hour WHERE $bucket = 'hour' AND hour >= $start AND hour < $end
)
SELECT
    bucket,
    bucket_end,                                     -- rect's right edge
    node || ' · ' || substr(gpu_uuid, 5, 8)        AS gpu,
    gpu_uuid,
    any_value(model)                                AS model,
    sum(alloc_s) / nullif(sum(metered_s), 0)        AS allocation,
    sum(sm_util_s) / nullif(sum(metered_s), 0)      AS utilization,
    sum(metered_s) / 3600                           AS metered_h
FROM buckets SEMI JOIN page USING (gpu_uuid)
GROUP BY ALL ORDER BY gpu, bucket;
