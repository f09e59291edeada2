-- Allocated and used GPU-hours per tenant and day, for the trend chart.
SELECT
    date_trunc('day', hour)::DATE          AS day,
    tenant,
    sum(alloc_dominant_share_s) / 3600     AS allocated_gpu_h,
    sum(usage_share_s) / 3600              AS used_gpu_h
FROM slice_hour_tenant
WHERE hour >= $start AND hour < $end
GROUP BY ALL ORDER BY day, tenant;
