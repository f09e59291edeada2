-- Fleet capacity per hour, in GPU-hours: used (NVML SM busy), allocated but unused
-- (reserved idle) and unallocated; the three add up to the metered capacity.
SELECT
    hour,
    sum(metered_s) / 3600                          AS capacity_gpu_h,
    sum(sm_util_s) / 3600                          AS used_gpu_h,
    sum(reserved_idle_s) / 3600                    AS reserved_idle_gpu_h,
    sum(unallocated_s) / 3600                      AS unallocated_gpu_h,
    sum(alloc_s) / 3600                            AS allocated_gpu_h,
    sum(gpus)                                      AS gpus,
    sum(slices)                                    AS slices
FROM cluster_hours($start, $end)
GROUP BY hour ORDER BY hour;
