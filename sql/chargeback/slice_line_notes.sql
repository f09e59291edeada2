-- Per slice line of a month being billed, what the line says beside its money, keyed as
-- cb_detail() keys its lines; only slice-hours with something to say are read:
-- unverified_u, the micro-seconds its usage could not be checked against NVML
-- (sql/schema/030_usage_verified.sql); unknown_u, the micro-seconds no reader measured its
-- usage (allocation stood in: cb_slice_shares); the DRA claim and driver of its latest
-- slice-hour that named them (sql/schema/040_dra_rollups.sql).
-- Reads the month's cb_gpu_id_t, cb_hour_t and cb_place_t that chargeback/bill.py
-- month_lines left, so each hour is placed where it was billed.
-- Parameters: $m_start, $m_end (the month's hours), $src_asof (NULL: live rollups; else the
-- as_of of a frozen copy).
WITH s AS (
    SELECT tenant, hour, gpu_uuid, namespace, pod, pod_uid, container, usage_unverified_s, usage_unknown_s, claim, driver
    FROM slice_hour_tenant
    WHERE $src_asof::DATE IS NULL AND hour >= $m_start::TIMESTAMP AND hour < $m_end::TIMESTAMP
      AND (usage_unverified_s > 0 OR usage_unknown_s > 0 OR claim IS NOT NULL OR driver IS NOT NULL)
    UNION ALL
    SELECT f.tenant, f.hour, f.gpu_uuid, f.namespace, f.pod, f.pod_uid, f.container, coalesce(u.usage_unverified_s, 0),
           coalesce(d.usage_unknown_s, 0), d.claim, d.driver
    FROM frozen_slice_hour f
    LEFT JOIN frozen_slice_unverified u USING (as_of, hour, gpu_uuid, pod_uid, container)
    LEFT JOIN frozen_slice_dra d USING (as_of, hour, gpu_uuid, pod_uid, container)
    WHERE f.as_of = $src_asof::DATE AND f.hour >= $m_start::TIMESTAMP AND f.hour < $m_end::TIMESTAMP
      AND (u.usage_unverified_s IS NOT NULL OR d.usage_unknown_s IS NOT NULL)
)
SELECT s.tenant, coalesce(s.namespace, '') AS namespace, coalesce(s.pod, '') AS pod, s.pod_uid, s.container,
       p.cluster, p.node, p.gpu_uuid, coalesce(p.model, '') AS model,
       sum(round(least(s.usage_unverified_s, 3600.0) * 1e6)::BIGINT)::BIGINT AS unverified_u,
       sum(round(least(s.usage_unknown_s, 3600.0) * 1e6)::BIGINT)::BIGINT AS unknown_u,
       coalesce(arg_max(s.claim, s.hour), '') AS claim, coalesce(arg_max(s.driver, s.hour), '') AS driver
FROM s
JOIN cb_gpu_id_t i USING (gpu_uuid)
JOIN cb_hour_t h ON h.hour = s.hour AND h.gid = i.gid
JOIN cb_place_t p ON p.pid = h.pid
GROUP BY ALL
