-- The slices on one GPU in the month.
SELECT
    tenant, coalesce(namespace, '(none)') AS namespace, pod, container,
    coalesce(arg_max(driver, hour), 'device plugin')          AS driver,   -- the DRA driver that granted it
    arg_max(claim, hour)                                      AS claim,    -- its ResourceClaim (DRA only)
    bool_or(whole_gpu)                                        AS whole_gpu,
    arg_max(alloc_memory_bytes, hour) / 1073741824.0          AS alloc_memory_gib,
    arg_max(alloc_cores_ratio, hour)                          AS alloc_cores,
    sum(metered_s) / 3600                                     AS hours,
    sum(alloc_dominant_share_s) / 3600                        AS allocated_gpu_h,
    sum(usage_share_s) / 3600                                 AS used_gpu_h,
    sum(usage_share_s) / nullif(sum(alloc_dominant_share_s), 0) AS used_of_allocated,
    max(sm_util_max)                                          AS sm_util_max,
    max(memory_used_max_bytes) / 1073741824.0                 AS memory_used_max_gib
FROM slice_hour_tenant
WHERE gpu_uuid = $gpu AND hour >= $start AND hour < $end
GROUP BY tenant, namespace, pod, pod_uid, container
ORDER BY allocated_gpu_h DESC;
