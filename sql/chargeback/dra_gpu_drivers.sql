-- Per GPU placement of a month being billed, the DRA driver of its latest GPU-hour that named
-- one (the idle line's driver), keyed as cb_gpu_agg() keys its lines; GPUs of no driver are
-- left out. Reads cb_gpu_id_t, cb_hour_t and cb_place_t as sql/chargeback/dra_lines.sql does.
-- Parameters: $m_start, $m_end, $src_asof (NULL: live rollups; else a frozen copy's as_of).
WITH g AS (
    SELECT hour, gpu_uuid, driver FROM gpu_hour
    WHERE $src_asof::DATE IS NULL AND hour >= $m_start::TIMESTAMP AND hour < $m_end::TIMESTAMP AND driver IS NOT NULL
    UNION ALL
    SELECT hour, gpu_uuid, driver FROM frozen_gpu_driver
    WHERE as_of = $src_asof::DATE AND hour >= $m_start::TIMESTAMP AND hour < $m_end::TIMESTAMP
)
SELECT p.cluster, p.node, p.gpu_uuid, coalesce(p.model, '') AS model, arg_max(g.driver, g.hour) AS driver
FROM g
JOIN cb_gpu_id_t i USING (gpu_uuid)
JOIN cb_hour_t h ON h.hour = g.hour AND h.gid = i.gid
JOIN cb_place_t p ON p.pid = h.pid
GROUP BY ALL
