-- The sharing dividend's inputs (docs/dividend.md), per day and per priced group of GPUs
-- (tenant cluster, node, model). Seconds are carried as integer milliseconds so that the
-- money computed from them is exact. A GPU belongs to its node's tenant; a GPU-hour is
-- "in use" when at least one container slice was on it in that hour; without slicing each
-- of those slices would have held the whole device for the seconds it was metered.
WITH s AS (
    SELECT hour, gpu_uuid, count(*) AS slices,
           sum(round(metered_s * 1000)::BIGINT) AS whole_gpu_ms
    FROM slice_hour
    WHERE hour >= $start AND hour < $end
    GROUP BY ALL
)
SELECT
    date_trunc('day', g.hour)::DATE                                              AS day,
    g.tenant, g.cluster, g.node, g.model,
    count(DISTINCT g.gpu_uuid)                                                   AS gpus,
    sum(round(g.metered_s * 1000)::BIGINT)::HUGEINT                              AS metered_ms,
    sum(CASE WHEN s.slices > 0 THEN round(g.metered_s * 1000)::BIGINT ELSE 0 END)::HUGEINT AS in_use_ms,
    coalesce(sum(s.whole_gpu_ms), 0)::HUGEINT                                    AS whole_gpu_ms,
    sum(coalesce(g.sm_util_s, 0))                                                AS sm_util_s,
    sum(coalesce(g.energy_joules, 0))                                            AS energy_joules
FROM gpu_hour_tenant g
LEFT JOIN s ON s.hour = g.hour AND s.gpu_uuid = g.gpu_uuid
WHERE g.hour >= $start AND g.hour < $end
GROUP BY ALL
ORDER BY day, g.tenant, g.node, g.model;
