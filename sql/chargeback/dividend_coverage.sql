-- Hours with metered data and distinct containers served: per day (the fleet), per tenant
-- over the period (a node's GPUs belong to its tenant) and for the fleet over the period.
-- The dividend's averages ("GPUs in use") divide GPU-hours by these hours.
SELECT
    date_trunc('day', g.hour)::DATE             AS day,
    g.tenant,
    count(DISTINCT g.hour)                      AS hours,
    count(DISTINCT (s.pod_uid, s.container)) FILTER (WHERE s.pod_uid IS NOT NULL) AS containers
FROM gpu_hour_tenant g
LEFT JOIN slice_hour s ON s.hour = g.hour AND s.gpu_uuid = g.gpu_uuid
WHERE g.hour >= $start AND g.hour < $end
GROUP BY GROUPING SETS ((date_trunc('day', g.hour)::DATE), (g.tenant), ())
ORDER BY day NULLS LAST, tenant NULLS LAST;
