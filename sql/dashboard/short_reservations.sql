-- Short-lived idle reservations: slices whose pod lived less than $max_life_s (first metered
-- hour to its latest sample) and ran no kernel in at least $min_idle_share of the time it
-- was metered. An hour counts as idle when the slice's SM share in it was zero. Allocated
-- share is carried as integer milliseconds so the cost priced from it is exact.
WITH per_slice AS (
    SELECT
        s.tenant, coalesce(s.namespace, '(none)') AS namespace, s.pod, s.container, s.node, s.cluster,
        substr(s.gpu_uuid, 5, 8)                                          AS gpu,
        any_value(g.model)                                                AS model,
        min(s.hour)                                                       AS opened_hour,
        (max(s.latest_ts_ms) - epoch_ms(min(s.hour))) / 1000              AS lived_s,
        sum(s.metered_s)                                                  AS reserved_s,
        sum(CASE WHEN s.used_sm_share_s = 0 THEN s.metered_s ELSE 0 END)  AS idle_s,
        sum(s.alloc_dominant_share_s) / 3600                              AS allocated_gpu_h,
        sum(round(s.alloc_dominant_share_s * 1000)::BIGINT)::BIGINT       AS alloc_ms
    FROM slice_hour_tenant s
    LEFT JOIN gpu_hour g ON g.hour = s.hour AND g.gpu_uuid = s.gpu_uuid
    WHERE s.hour >= $start AND s.hour < $end
    GROUP BY s.tenant, s.namespace, s.pod, s.pod_uid, s.container, s.node, s.cluster, s.gpu_uuid
)
SELECT tenant, namespace, pod, container, node, gpu, model, cluster, opened_hour,
       lived_s / 3600 AS lived_h, reserved_s / 3600 AS reserved_h, idle_s / 3600 AS idle_h,
       allocated_gpu_h, alloc_ms
FROM per_slice
WHERE lived_s < $max_life_s AND idle_s > 0 AND idle_s >= $min_idle_share * reserved_s
ORDER BY alloc_ms DESC, opened_hour, tenant, pod;
