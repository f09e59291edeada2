-- Fleet capacity per hour, in GPU-hours: used (NVML SM busy), allocated but unused
-- (reserved idle) and unallocated; the three add up to the metered capacity.
SELECT
    hour,
    sum(metered_s) / 3600                                              AS capacity_gpu_h,
    sum(sm_util_s) / 3600                                              AS used_gpu_h,
    sum(greatest(alloc_s - sm_util_s, 0)) / 3600                       AS reserved_idle_gpu_h,
    sum(greatest(metered_s - greatest(alloc_s, sm_util_s), 0)) / 3600  AS unallocated_gpu_h,
    sum(alloc_s) / 3600                                                AS allocated_gpu_h,
    count(*)                                                           AS gpus,
    sum(slices)                                                        AS slices
FROM dash_gpu_hour
WHERE hour >= $start AND hour < $end
GROUP BY hour ORDER BY hour;
