-- Daily fleet utilization (NVML SM busy / metered time) and allocation, for the trend.
SELECT
    date_trunc('day', hour)::DATE                  AS day,
    sum(sm_util_s) / nullif(sum(metered_s), 0)     AS utilization,
    sum(alloc_s) / nullif(sum(metered_s), 0)       AS allocation,
    sum(slices) / nullif(count(*), 0)              AS slices_per_gpu
FROM dash_gpu_hour
WHERE hour >= $start AND hour < $end
GROUP BY ALL ORDER BY day;
