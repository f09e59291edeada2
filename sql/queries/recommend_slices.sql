-- Per-slice usage statistics over a window [$start, $end), for ingest.recommend.
-- A slice is one container's share of one physical GPU: (gpu_uuid, pod_uid, container).
-- Percentiles are nearest-rank (quantile_disc: the value at rank ceil(q * n) of the n
-- hourly values, so every percentile is an hour that really happened), one value per
-- metered hour:
--   memory: the hour's peak (memory_used_max_bytes), falling back to the hour's mean
--           (memory_used_byte_s / metered_s) where no peak was stored. Memory limits are
--           hard (an allocation above the limit fails), so sizing works on peaks.
--   SM:     the hour's mean share of the GPU's SMs (used_sm_share_s / metered_s). SM
--           limits throttle rather than kill, and time-sliced SM use adds up as means.
--   *_max:  the largest hourly peak (memory_used_max_bytes, sm_util_max; means where absent).
-- Attributes that can change (grant, last kernel age, node) are taken from the slice's
-- latest metered hour in the window, by joining that one row back (much cheaper than
-- arg_max over every row). The tenant is resolved after aggregating (16k rows,
-- not 11M) with the same rule as the slice_hour_tenant view: namespace override, else the
-- cluster's tenant, else 'unassigned'.
WITH per_slice AS MATERIALIZED (
    SELECT
        gpu_uuid, pod_uid, container,
        bool_or(whole_gpu)          AS whole_gpu,
        count(*)                    AS hours,
        min(hour)                   AS first_hour,
        max(hour)                   AS last_hour,
        sum(metered_s)              AS metered_s,
        sum(usage_share_s)          AS usage_share_s,
        sum(alloc_dominant_share_s) AS alloc_dominant_share_s,
        quantile_disc(coalesce(memory_used_max_bytes::DOUBLE, memory_used_byte_s / metered_s),
                      [0.5, 0.95, 0.99]) AS mem_q,
        max(coalesce(memory_used_max_bytes::DOUBLE, memory_used_byte_s / metered_s)) AS mem_max,
        quantile_disc(used_sm_share_s / metered_s, [0.5, 0.95, 0.99]) AS sm_q,
        max(coalesce(sm_util_max::DOUBLE, used_sm_share_s / metered_s)) AS sm_max
    FROM slice_hour
    WHERE hour >= $start AND hour < $end AND metered_s > 0
    GROUP BY gpu_uuid, pod_uid, container
),
latest AS (
    SELECT l.gpu_uuid, l.pod_uid, l.container, l.cluster, l.node, l.namespace, l.pod,
           l.alloc_memory_bytes, l.alloc_cores_ratio, l.last_kernel_age_s,
           l.alloc_mem_share_s / l.metered_s AS alloc_mem_share,
           l.alloc_cores_share_s / l.metered_s AS alloc_cores_share
    FROM slice_hour l
    JOIN per_slice p ON l.gpu_uuid = p.gpu_uuid AND l.pod_uid = p.pod_uid
                    AND l.container = p.container AND l.hour = p.last_hour
),
gpu AS (
    SELECT gpu_uuid, arg_max(model, hour) AS model,
           arg_max(memory_total_bytes, hour) AS memory_total_bytes
    FROM gpu_hour WHERE hour >= $start AND hour < $end
    GROUP BY gpu_uuid
)
SELECT
    coalesce(o.tenant, ct.tenant, 'unassigned') AS tenant,
    l.cluster AS cluster, l.node AS node, s.gpu_uuid,
    g.model, g.memory_total_bytes,
    l.namespace AS namespace, l.pod AS pod, s.pod_uid, s.container, s.whole_gpu,
    s.hours, s.first_hour, s.last_hour, s.metered_s, s.usage_share_s, s.alloc_dominant_share_s,
    -- the grant: the annotation's figure, else the share ingest derived (HAMi's own limit;
    -- whole GPU = 1) times the GPU's memory
    coalesce(l.alloc_memory_bytes,
             round(l.alloc_mem_share * g.memory_total_bytes)::BIGINT) AS alloc_memory_bytes,
    coalesce(l.alloc_cores_ratio::DOUBLE, l.alloc_cores_share) AS alloc_cores_ratio,
    l.last_kernel_age_s::DOUBLE AS last_kernel_age_s,   -- NULL: never ran a kernel
    s.mem_q[1] AS mem_p50, s.mem_q[2] AS mem_p95, s.mem_q[3] AS mem_p99, s.mem_max,
    s.sm_q[1] AS sm_p50, s.sm_q[2] AS sm_p95, s.sm_q[3] AS sm_p99, s.sm_max
FROM per_slice s
JOIN latest l ON l.gpu_uuid = s.gpu_uuid AND l.pod_uid = s.pod_uid AND l.container = s.container
LEFT JOIN gpu g ON g.gpu_uuid = s.gpu_uuid
LEFT JOIN tenant_namespace_overrides o
       ON o.cluster = l.cluster AND o.namespace = l.namespace
LEFT JOIN (SELECT cluster, any_value(tenant) AS tenant FROM cluster_tenant GROUP BY cluster) ct
       ON ct.cluster = l.cluster
ORDER BY cluster, node, s.gpu_uuid, s.pod_uid, s.container
