-- Reservations still held at the month's latest metered hour whose container has run no
-- kernel for at least $min_idle_s seconds (or never ran one).
WITH latest AS (
    SELECT max(last_hour) AS hour FROM slice_days($start, $end)
), per_slice AS (
    SELECT
        tenant, coalesce(namespace, '(none)') AS namespace, pod, pod_uid, container, node,
        substr(gpu_uuid, 5, 8)                           AS gpu,
        max(last_hour)                                   AS last_hour,
        arg_max(kernel_age_s, kernel_hour)               AS last_kernel_age_s,
        arg_max(allocation, allocation_hour)             AS allocation,
        sum(metered_s) / 3600                            AS reserved_h,
        sum(alloc_s) / 3600                              AS allocated_gpu_h
    FROM slice_days_tenant($start, $end)
    GROUP BY tenant, namespace, pod, pod_uid, container, node, gpu_uuid
)
SELECT tenant, namespace, pod, container, node, gpu, allocation,
       last_kernel_age_s IS NULL                        AS never_ran_kernel,
       last_kernel_age_s / 3600                         AS idle_h,
       reserved_h, allocated_gpu_h
FROM per_slice, latest
WHERE per_slice.last_hour = latest.hour
  AND (last_kernel_age_s IS NULL OR last_kernel_age_s >= $min_idle_s)
ORDER BY allocated_gpu_h DESC, tenant, pod;
