-- The month's headline figures for the fleet (day figures: sql/views/310_days.sql).
SELECT
    sum(metered_s) / 3600                                    AS capacity_gpu_h,
    sum(sm_util_s) / 3600                                    AS used_gpu_h,
    sum(alloc_s) / 3600                                      AS allocated_gpu_h,
    sum(sm_util_s) / nullif(sum(metered_s), 0)               AS utilization,
    sum(alloc_s) / nullif(sum(metered_s), 0)                 AS allocation,
    sum(slices) / nullif(sum(hours), 0)                      AS slices_per_gpu,
    sum(shared_hours) / nullif(sum(hours), 0)                AS shared_fraction,
    count(DISTINCT gpu_uuid)                                 AS gpus,
    count(DISTINCT node)                                     AS nodes,
    count(DISTINCT tenant)                                   AS tenants
FROM gpu_days_tenant($start, $end);
