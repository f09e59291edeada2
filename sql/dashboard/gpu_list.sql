-- The physical GPUs metered in the month, with their month figures.
SELECT
    node || ' · ' || substr(gpu_uuid, 5, 8)        AS gpu,
    gpu_uuid, node, any_value(tenant) AS tenant, any_value(model) AS model,
    coalesce(any_value(driver), 'device plugin')   AS driver,
    sum(metered_s) / 3600                           AS metered_h,
    sum(alloc_s) / nullif(sum(metered_s), 0)        AS allocation,
    -- NULL where no reader measured the device (a DRA device NVML does not list): by allocation only
    CASE WHEN bool_or(nvml_read) THEN sum(sm_util_s) / nullif(sum(metered_s), 0) END AS utilization,
    max(max_slices)                                 AS max_slices
FROM gpu_days_tenant($start, $end)
GROUP BY ALL ORDER BY node, gpu_uuid;
