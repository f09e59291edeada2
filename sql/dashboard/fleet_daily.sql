-- Daily fleet utilization (NVML SM busy / metered time) and allocation, for the trend.
SELECT
    day::DATE                                      AS day,
    sum(sm_util_s) / nullif(sum(metered_s), 0)     AS utilization,
    sum(alloc_s) / nullif(sum(metered_s), 0)       AS allocation,
    sum(slices) / nullif(sum(hours), 0)            AS slices_per_gpu
FROM gpu_days($start, $end)
GROUP BY ALL ORDER BY day;
