-- Allocated and used GPU-hours per tenant and day, for the trend chart.
SELECT
    day::DATE                  AS day,
    tenant,
    sum(alloc_s) / 3600        AS allocated_gpu_h,
    sum(usage_s) / 3600        AS used_gpu_h
FROM slice_days_tenant($start, $end)
GROUP BY ALL ORDER BY day, tenant;
