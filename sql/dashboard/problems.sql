-- What needs a person in the month, one row per thing (the Problems page), each naming its
-- GPU so the page links to the GPU's slices. Kinds, in this order, the most hours first:
--   degraded:     the GPU's degraded GPU-hours (a critical Xid, an uncorrectable ECC error,
--                 lost, or throttled past $throttled_share; docs/health.md);
--   unmetered:    hours with no metering between the GPU's first metered hour and the
--                 scope's latest one (gaps, never zero use);
--   unverified / unknown: a slice's hours whose usage NVML could not check, or that no
--                 reader measured (billed by allocation), six minutes or more;
--   idle:         a GPU allocated at least $idle_alloc_min of its time whose SM kernels ran
--                 under $idle_util_max of it: hours = allocation kernels did not use;
--   memory:       a slice whose peak memory reached $memory_limit_share of its limit in
--                 force: hours = the hours it did.
-- $tenant narrows to one tenant (NULL: every tenant the scope holds).
WITH days AS (
    SELECT * FROM gpu_days_tenant($start, $end)
), latest AS (
    SELECT max(day + to_hours(floor(log2(hour_mask))::BIGINT)) AS hour FROM days WHERE hour_mask > 0
), gpus AS (
    SELECT gpu_uuid, node, any_value(tenant) AS tenant, sum(hours) AS hours,
           sum(alloc_s) / nullif(sum(metered_s), 0) AS allocation,
           CASE WHEN bool_or(nvml_read) THEN sum(sm_util_s) / nullif(sum(metered_s), 0) END AS utilization,
           CASE WHEN bool_or(nvml_read) THEN sum(greatest(alloc_s - sm_util_s, 0)) / 3600 END AS idle_alloc_gpu_h,
           min(day + to_hours(round(log2(hour_mask & -hour_mask))::BIGINT)) FILTER (WHERE hour_mask > 0) AS first_hour
    FROM days
    GROUP BY gpu_uuid, node
), slices AS (   -- only the slice-hours with something to say are grouped: the month's scan stays one pass
    SELECT tenant, gpu_uuid, node, namespace, pod, container,
           sum(coalesce(usage_unverified_s, 0)) / 3600 AS unverified_h,
           sum(coalesce(usage_unknown_s, 0)) / 3600 AS unknown_h,
           count(*) FILTER (WHERE near) AS near_h,
           max(memory_used_max_bytes / alloc_memory_bytes) FILTER (WHERE near) AS memory_peak_share
    FROM (
        SELECT *, coalesce(alloc_memory_bytes > 0
                           AND memory_used_max_bytes >= $memory_limit_share * alloc_memory_bytes, false) AS near
        FROM slice_hour_tenant
        WHERE hour >= $start AND hour < $end
    )
    WHERE coalesce(usage_unverified_s, 0) > 0 OR coalesce(usage_unknown_s, 0) > 0 OR near
    GROUP BY tenant, gpu_uuid, node, namespace, pod, pod_uid, container
), rows AS (
    SELECT 1 AS rank, 'degraded' AS kind, g.tenant, e.gpu_uuid, e.node, NULL AS slice,
           string_agg(DISTINCT e.what, '; ' ORDER BY e.what) AS what, count(*)::DOUBLE AS hours
    FROM gpu_health_events($start, $end, $throttled_share) e
    JOIN gpus g ON g.gpu_uuid = e.gpu_uuid AND g.node = e.node
    WHERE e.degraded
    GROUP BY g.tenant, e.gpu_uuid, e.node
    UNION ALL
    SELECT 2, 'unmetered', tenant, gpu_uuid, node, NULL,
           'unmetered hours after its first metered hour, '
               || strftime(first_hour, '%Y-%m-%d %H:00'),
           (datediff('hour', first_hour, (SELECT hour FROM latest)) + 1 - hours)::DOUBLE
    FROM gpus
    WHERE datediff('hour', first_hour, (SELECT hour FROM latest)) + 1 - hours > 0
    UNION ALL
    SELECT 3, 'unverified', tenant, gpu_uuid, node, concat_ws('/', namespace, pod, container),
           'usage NVML could not check', unverified_h
    FROM slices WHERE unverified_h >= 0.1   -- six minutes or more: less is a sample's noise, not a person's job
    UNION ALL
    SELECT 4, 'unknown', tenant, gpu_uuid, node, concat_ws('/', namespace, pod, container),
           'usage no reader measured (billed by allocation)', unknown_h
    FROM slices WHERE unknown_h >= 0.1
    UNION ALL
    SELECT 5, 'idle', tenant, gpu_uuid, node, NULL,
           'allocated ' || round(allocation * 100, 1) || ' %, SM busy ' || round(utilization * 100, 1) || ' %',
           idle_alloc_gpu_h
    FROM gpus WHERE allocation >= $idle_alloc_min AND utilization < $idle_util_max
    UNION ALL
    SELECT 6, 'memory', tenant, gpu_uuid, node, concat_ws('/', namespace, pod, container),
           'peak memory ' || round(memory_peak_share * 100, 1) || ' % of its limit', near_h::DOUBLE
    FROM slices WHERE near_h > 0
)
SELECT kind, tenant, node || ' · ' || substr(gpu_uuid, 5, 8) AS gpu, gpu_uuid, node, slice, what, hours
FROM rows
WHERE $tenant IS NULL OR tenant = $tenant
ORDER BY rank, hours DESC, natural_key(node), gpu_uuid, slice;
