-- Slices that pay for the most unused capacity: allocated minus used GPU-hours (workload
-- idle), per slice over the month.
SELECT
    tenant, coalesce(namespace, '(none)') AS namespace, pod, container, node,
    substr(gpu_uuid, 5, 8)                                           AS gpu,
    coalesce(arg_max(driver, hour), 'device plugin')                 AS driver,
    arg_max(claim, hour)                                             AS claim,
    sum(alloc_dominant_share_s) / 3600                               AS allocated_gpu_h,
    sum(usage_share_s) / 3600                                        AS used_gpu_h,
    sum(greatest(alloc_dominant_share_s - usage_share_s, 0)) / 3600  AS unused_gpu_h,
    sum(greatest(alloc_dominant_share_s - usage_share_s, 0))
        / nullif(sum(alloc_dominant_share_s), 0)                     AS unused_fraction
FROM slice_hour_tenant
WHERE hour >= $start AND hour < $end
GROUP BY tenant, namespace, pod, pod_uid, container, node, gpu_uuid
ORDER BY unused_gpu_h DESC, tenant, pod
LIMIT $limit;
