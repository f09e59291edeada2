-- The sharing dividend's inputs (docs/dividend.md), per day and per priced group of GPUs
-- (tenant cluster, node, model), from the day figures (sql/views/310_days.sql). Seconds are
-- carried as integer milliseconds, rounded hour by hour, so that the money computed from them
-- is exact. A GPU belongs to its node's tenant; a GPU-hour is "in use" when at least one
-- container slice was on it in that hour; without slicing each of those slices would have
-- held the whole device for the seconds it was metered.
SELECT
    day::DATE                                    AS day,
    tenant, cluster, node, model,
    count(DISTINCT gpu_uuid)                     AS gpus,
    sum(metered_ms)::HUGEINT                     AS metered_ms,
    sum(in_use_ms)::HUGEINT                      AS in_use_ms,
    sum(whole_gpu_ms)::HUGEINT                   AS whole_gpu_ms,
    sum(sm_util_s)                               AS sm_util_s,
    coalesce(sum(energy_joules), 0)              AS energy_joules
FROM gpu_days_tenant($start, $end)
GROUP BY ALL
ORDER BY day, tenant, node, model;
