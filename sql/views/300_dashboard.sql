-- Dashboard: one row per metered GPU-hour with its slices' allocation and usage summed.
-- Shares on an oversubscribed GPU can sum above the GPU; capacity figures cap them at the
-- metered seconds so "allocated" never exceeds what the fleet had.
CREATE OR REPLACE TEMP VIEW dash_gpu_hour AS
SELECT
    g.hour, g.cluster, g.tenant, g.node, g.gpu_uuid, g.model, g.memory_total_bytes, g.driver,
    g.metered_s,
    coalesce(g.sm_util_s, 0)                          AS sm_util_s,     -- NVML SM busy, share-seconds
    g.sm_util_s IS NOT NULL                           AS nvml_read,     -- false: a device no reader measures
    coalesce(g.energy_joules, 0)                      AS energy_joules,
    coalesce(s.slices, 0)                             AS slices,
    least(coalesce(s.alloc_s, 0), g.metered_s)        AS alloc_s,       -- dominant share, capped
    least(coalesce(s.usage_s, 0), g.metered_s)        AS usage_s        -- billing usage share, capped
FROM gpu_hour_tenant g
LEFT JOIN (
    SELECT hour, gpu_uuid, count(*) AS slices,
           sum(alloc_dominant_share_s) AS alloc_s, sum(usage_share_s) AS usage_s
    FROM slice_hour GROUP BY hour, gpu_uuid
) s ON s.hour = g.hour AND s.gpu_uuid = g.gpu_uuid;

-- A name's natural order: its runs of digits compared as numbers, so gpu-node-2 sorts
-- before gpu-node-10 (as a list of parts, digits left-padded to one width).
CREATE OR REPLACE TEMP MACRO natural_key(name) AS
list_transform(regexp_extract_all(coalesce(name, ''), '\d+|\D+'),
               lambda part: CASE WHEN regexp_full_match(part, '\d+') THEN lpad(part, 24, '0') ELSE part END);
