-- Slices that pay for the most unused capacity: allocated minus used GPU-hours (workload
-- idle), per slice over the month.
SELECT
    tenant, coalesce(namespace, '(none)') AS namespace, pod, container, node,
    substr(gpu_uuid, 5, 8)                                 AS gpu,
    coalesce(arg_max(driver, driver_hour), 'device plugin') AS driver,
    arg_max(claim, claim_hour)                             AS claim,
    sum(alloc_s) / 3600                                    AS allocated_gpu_h,
    sum(usage_s) / 3600                                    AS used_gpu_h,
    sum(unused_s) / 3600                                   AS unused_gpu_h,
    sum(unused_s) / nullif(sum(alloc_s), 0)                AS unused_fraction
FROM slice_days_tenant($start, $end)
GROUP BY tenant, namespace, pod, pod_uid, container, node, gpu_uuid
ORDER BY unused_gpu_h DESC, tenant, pod
LIMIT $limit;
