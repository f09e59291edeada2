-- The month's fleet figures per tenant (a node's GPUs belong to its tenant's cluster).
SELECT
    g.tenant,
    coalesce(t.display_name, g.tenant)                AS display_name,
    count(DISTINCT g.gpu_uuid)                        AS gpus,
    sum(g.metered_s) / 3600                           AS capacity_gpu_h,
    sum(g.alloc_s) / nullif(sum(g.metered_s), 0)      AS allocation,
    sum(g.sm_util_s) / nullif(sum(g.metered_s), 0)    AS utilization,
    sum(g.slices) / nullif(sum(g.hours), 0)           AS slices_per_gpu
FROM gpu_days_tenant($start, $end) g
LEFT JOIN tenants t ON t.tenant = g.tenant
GROUP BY ALL ORDER BY capacity_gpu_h DESC, tenant;
