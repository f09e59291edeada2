-- Hours with metered data and distinct containers served: per day (the fleet), per tenant
-- over the period (a node's GPUs belong to its tenant) and for the fleet over the period.
-- The dividend's averages ("GPUs in use") divide GPU-hours by these hours. Hours come from
-- the day figures' hour bits (an hour counts once however many GPUs it had); containers are
-- those on a GPU-hour with a GPU row, counted for that GPU's tenant.
WITH g AS (
    SELECT day, tenant, bit_or(hour_mask) AS mask FROM gpu_days_tenant($start, $end) GROUP BY ALL
), day_hours AS (
    SELECT day, bit_count(bit_or(mask)) AS hours FROM g GROUP BY day
), c AS (
    SELECT s.day, coalesce(ct.tenant, 'unassigned') AS tenant, s.pod_uid, s.container
    FROM slice_days($start, $end) s
    SEMI JOIN gpu_days($start, $end) gd ON gd.day = s.day AND gd.gpu_uuid = s.gpu_uuid AND gd.cluster = s.gpu_cluster
    LEFT JOIN cluster_tenant ct ON ct.cluster = s.gpu_cluster
    WHERE s.pod_uid IS NOT NULL
)
SELECT d.day::DATE AS day, NULL::VARCHAR AS tenant, d.hours,
       (SELECT count(DISTINCT (pod_uid, container)) FROM c WHERE c.day = d.day) AS containers
FROM day_hours d
UNION ALL
SELECT NULL, t.tenant, t.hours,
       (SELECT count(DISTINCT (pod_uid, container)) FROM c WHERE c.tenant = t.tenant)
FROM (SELECT tenant, sum(bit_count(mask)) AS hours FROM g GROUP BY tenant) t
UNION ALL
SELECT NULL, NULL, (SELECT coalesce(sum(hours), 0) FROM day_hours),
       (SELECT count(DISTINCT (pod_uid, container)) FROM c)
ORDER BY day NULLS LAST, tenant NULLS LAST;
