-- Short-lived idle reservations: slices whose pod lived less than $max_life_s (first metered
-- hour to its latest sample) and ran no kernel in at least $min_idle_share of the time it
-- was metered. An hour counts as idle when the slice's SM share in it was zero. Allocated
-- share is carried as integer milliseconds so the cost priced from it is exact.
WITH per_slice AS (
    SELECT
        tenant, coalesce(namespace, '(none)') AS namespace, pod, container, node, cluster,
        substr(gpu_uuid, 5, 8)                                            AS gpu,
        any_value(model)                                                  AS model,
        min(first_hour)                                                   AS opened_hour,
        (max(latest_ts_ms) - epoch_ms(min(first_hour))) / 1000            AS lived_s,
        sum(metered_s)                                                    AS reserved_s,
        sum(idle_s)                                                       AS idle_s,
        sum(alloc_s) / 3600                                               AS allocated_gpu_h,
        sum(alloc_ms)::BIGINT                                             AS alloc_ms
    FROM slice_days_tenant($start, $end)
    GROUP BY tenant, namespace, pod, pod_uid, container, node, cluster, gpu_uuid
)
SELECT tenant, namespace, pod, container, node, gpu, model, cluster, opened_hour,
       lived_s / 3600 AS lived_h, reserved_s / 3600 AS reserved_h, idle_s / 3600 AS idle_h,
       allocated_gpu_h, alloc_ms
FROM per_slice
WHERE lived_s < $max_life_s AND idle_s > 0 AND idle_s >= $min_idle_share * reserved_s
ORDER BY alloc_ms DESC, opened_hour, tenant, pod;
