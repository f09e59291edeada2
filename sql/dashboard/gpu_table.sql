-- The month's physical GPUs with their figures, what costs money and what needs a person,
-- filtered and ordered here. Every choice is a bound parameter; NULL means no filter.
--   $tenant $node $model $driver: equal to;  $search: part of the GPU's UUID or node, or of
--   the pod, namespace or ResourceClaim of a slice on it (case-insensitive, no wildcards);
--   $health: 'problem' (any health event), 'degraded', 'xid' (a critical Xid), 'ecc',
--   'throttled', 'lost', 'healthy';
--   $sort: 'name' (natural order of node, then UUID) or a column, largest first:
--   'problems' (problem_h), 'cost', 'waste_cost', 'idle', 'waste', 'degraded', 'unverified',
--   'unmetered'.
-- Prices come in as parallel lists per (model, node, cluster) from the price catalog; cost
-- keys are exact DECIMAL (price x milliseconds), the page turns them into money.
-- Problem columns, in hours:
--   idle_alloc_gpu_h: allocation SM kernels did not use, per GPU-day (NULL: no usage reader);
--   waste_gpu_h:      the slices' allocation minus usage, per slice-hour (the Waste page's);
--   degraded_h:       degraded GPU-hours (docs/health.md);
--   unverified_h:     slice-hours whose usage NVML could not check;
--   unmetered_h:      hours with no row for the GPU between its first metered hour and the
--                     scope's latest one (a gap in metering, never counted as zero use).
WITH prices AS (
    SELECT unnest($price_model) AS model, unnest($price_node) AS node, unnest($price_cluster) AS cluster,
           unnest($price_per_h)::DECIMAL(18, 6) AS gpu_hour
), days AS (
    SELECT * FROM gpu_days_tenant($start, $end)
), latest AS (
    SELECT max(day + to_hours(floor(log2(hour_mask))::BIGINT)) AS hour FROM days WHERE hour_mask > 0
), gpus AS (
    SELECT node || ' · ' || substr(gpu_uuid, 5, 8)            AS gpu,
           gpu_uuid, node, any_value(tenant) AS tenant, any_value(model) AS model,
           coalesce(any_value(driver), 'device plugin')      AS driver,
           any_value(cluster)                                AS cluster,
           sum(metered_s) / 3600                              AS metered_h,
           sum(metered_ms)::BIGINT                            AS metered_ms,
           sum(alloc_s) / nullif(sum(metered_s), 0)           AS allocation,
           CASE WHEN bool_or(nvml_read) THEN sum(sm_util_s) / nullif(sum(metered_s), 0) END AS utilization,
           max(max_slices)                                    AS max_slices,
           CASE WHEN bool_or(nvml_read) THEN sum(greatest(alloc_s - sm_util_s, 0)) / 3600 END AS idle_alloc_gpu_h,
           sum(hours)                                         AS hours,
           min(day + to_hours(round(log2(hour_mask & -hour_mask))::BIGINT)) FILTER (WHERE hour_mask > 0) AS first_hour
    FROM days
    GROUP BY gpu_uuid, node
), slices AS (   -- search_hit: the search names a pod, namespace or claim of a slice on the GPU
    SELECT gpu_uuid, sum(unused_s) / 3600 AS waste_gpu_h, sum(round(unused_s * 1000))::BIGINT AS unused_ms,
           sum(unverified_s) / 3600 AS unverified_h,
           coalesce(bool_or(contains(lower(coalesce(pod, '')), lower($search))
                            OR contains(lower(coalesce(namespace, '')), lower($search))
                            OR contains(lower(coalesce(claim, '')), lower($search))), false) AS search_hit
    FROM slice_days($start, $end)
    GROUP BY gpu_uuid
), health AS (
    SELECT gpu_uuid, count(*) FILTER (WHERE degraded) AS degraded_h, sum(xid_critical_count) AS xid_critical,
           sum(ecc_uncorrected_increase) AS ecc_errors, sum(throttled_s) / 3600 AS throttled_h,
           sum(lost_s) / 3600 AS lost_h
    FROM gpu_health_events($start, $end, $throttled_share)
    GROUP BY gpu_uuid
), t AS (
    SELECT g.gpu, g.gpu_uuid, g.node, g.tenant, g.model, g.driver, g.cluster, g.metered_h, g.allocation,
           g.utilization, g.max_slices, g.idle_alloc_gpu_h,
           coalesce(s.waste_gpu_h, 0)                     AS waste_gpu_h,
           coalesce(h.degraded_h, 0)                      AS degraded_h,
           coalesce(s.unverified_h, 0)                    AS unverified_h,
           greatest(datediff('hour', g.first_hour, (SELECT hour FROM latest)) + 1 - g.hours, 0) AS unmetered_h,
           coalesce(h.xid_critical, 0)                    AS xid_critical,
           concat_ws(', ', CASE WHEN h.xid_critical > 0 THEN 'critical Xid' END,
                           CASE WHEN h.ecc_errors > 0 THEN 'ECC errors' END,
                           CASE WHEN h.throttled_h > 0 THEN 'throttled' END,
                           CASE WHEN h.lost_h > 0 THEN 'lost' END) AS health,
           p.gpu_hour                                     AS price_gpu_hour,
           g.metered_ms, coalesce(s.unused_ms, 0)         AS unused_ms,
           p.gpu_hour * g.metered_ms                      AS cost_key,
           p.gpu_hour * coalesce(s.unused_ms, 0)          AS waste_cost_key,
           coalesce(s.search_hit, false)                  AS search_hit,
           h.gpu_uuid IS NOT NULL                         AS has_event,
           coalesce(h.ecc_errors, 0) > 0                  AS has_ecc,
           coalesce(h.throttled_h, 0) > 0                 AS has_throttle,
           coalesce(h.lost_h, 0) > 0                      AS has_lost
    FROM gpus g
    LEFT JOIN slices s USING (gpu_uuid)
    LEFT JOIN health h USING (gpu_uuid)
    LEFT JOIN prices p ON p.model = g.model AND p.node = g.node AND p.cluster = g.cluster
)
SELECT * EXCLUDE (has_event, has_ecc, has_throttle, has_lost, search_hit),
       degraded_h + unverified_h + unmetered_h + coalesce(idle_alloc_gpu_h, 0) AS problem_h
FROM t
WHERE ($tenant IS NULL OR tenant = $tenant)
  AND ($node IS NULL OR node = $node)
  AND ($model IS NULL OR model = $model)
  AND ($driver IS NULL OR driver = $driver)
  AND ($health IS NULL
       OR ($health = 'problem' AND has_event)
       OR ($health = 'degraded' AND degraded_h > 0)
       OR ($health = 'xid' AND xid_critical > 0)
       OR ($health = 'ecc' AND has_ecc)
       OR ($health = 'throttled' AND has_throttle)
       OR ($health = 'lost' AND has_lost)
       OR ($health = 'healthy' AND NOT has_event))
  AND ($search IS NULL
       OR contains(lower(gpu_uuid), lower($search)) OR contains(lower(node), lower($search))
       OR search_hit)
ORDER BY CASE $sort
             WHEN 'problems'   THEN problem_h
             WHEN 'cost'       THEN cost_key::DOUBLE
             WHEN 'waste_cost' THEN waste_cost_key::DOUBLE
             WHEN 'idle'       THEN idle_alloc_gpu_h
             WHEN 'waste'      THEN waste_gpu_h
             WHEN 'degraded'   THEN degraded_h
             WHEN 'unverified' THEN unverified_h
             WHEN 'unmetered'  THEN unmetered_h
         END DESC NULLS LAST,
         natural_key(node), gpu_uuid;
