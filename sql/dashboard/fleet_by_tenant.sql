-- The month's fleet figures per tenant (a node's GPUs belong to its tenant's cluster).
SELECT
    g.tenant,
    coalesce(t.display_name, g.tenant)                AS display_name,
    count(DISTINCT g.gpu_uuid)                        AS gpus,
    sum(g.metered_s) / 3600                           AS capacity_gpu_h,
    sum(g.alloc_s) / nullif(sum(g.metered_s), 0)      AS allocation,
    sum(g.sm_util_s) / nullif(sum(g.metered_s), 0)    AS utilization,
    sum(g.slices) / nullif(count(*), 0)               AS slices_per_gpu
FROM dash_gpu_hour g
LEFT JOIN tenants t ON t.tenant = g.tenant
WHERE g.hour >= $start AND g.hour < $end
GROUP BY ALL ORDER BY capacity_gpu_h DESC, tenant;
