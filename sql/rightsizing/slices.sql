-- Per-slice usage statistics over a window [$start, $end), for slicemeter.rightsizing.plan.
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
-- Attributes that can change (grant, last kernel age) are taken from the slice's latest
-- metered hour in the window. The figures come in parts (slice_sizing_parts: per slice-day in
-- a readers' file, which keeps them; else one part over the window, sql/views/310_days.sql):
-- sums, latest values by their hour, and the percentiles over the parts' hourly values.
-- The tenant is resolved after aggregating with the same rule as the slice_hour_tenant view:
-- namespace override, else the cluster's tenant, else 'unassigned'.
WITH per_slice AS (
    SELECT
        gpu_uuid, pod_uid, container,
        -- fixed for a slice: its GPU sits on one node of one cluster, a pod has one namespace
        any_value(cluster)          AS cluster,
        any_value(node)             AS node,
        any_value(namespace)        AS namespace,
        any_value(pod)              AS pod,
        arg_max(alloc_memory_bytes, alloc_memory_hour)     AS alloc_memory_bytes,
        arg_max(alloc_cores_ratio, alloc_cores_hour)       AS alloc_cores_ratio,
        arg_max(alloc_mem_share, alloc_mem_share_hour)     AS alloc_mem_share,
        arg_max(alloc_cores_share, alloc_cores_share_hour) AS alloc_cores_share,
        -- a NULL kernel age at the latest hour means "never", so it must not be skipped
        arg_max_null(last_kernel_age_s, last_hour)         AS last_kernel_age_s,
        bool_or(whole_gpu)          AS whole_gpu,
        sum(hours)::BIGINT          AS hours,
        min(first_hour)             AS first_hour,
        max(last_hour)              AS last_hour,
        sum(metered_s)              AS metered_s,
        sum(usage_share_s)          AS usage_share_s,
        sum(alloc_dominant_share_s) AS alloc_dominant_share_s,
        list_aggregate(flatten(list(mem_values)), 'quantile_disc', [0.5, 0.95, 0.99]) AS mem_q,
        max(mem_max)                AS mem_max,
        list_aggregate(flatten(list(sm_values)), 'quantile_disc', [0.5, 0.95, 0.99]) AS sm_q,
        max(sm_max)                 AS sm_max
    FROM slice_sizing_parts($start, $end)
    GROUP BY gpu_uuid, pod_uid, container
),
gpu AS (
    SELECT gpu_uuid, arg_max(model, hour) AS model,
           arg_max(memory_total_bytes, hour) AS memory_total_bytes
    FROM gpu_hour WHERE hour >= $start AND hour < $end
    GROUP BY gpu_uuid
)
SELECT
    coalesce(o.tenant, ct.tenant, 'unassigned') AS tenant,
    s.cluster AS cluster, s.node AS node, s.gpu_uuid,
    g.model, g.memory_total_bytes,
    s.namespace AS namespace, s.pod AS pod, s.pod_uid, s.container, s.whole_gpu,
    s.hours, s.first_hour, s.last_hour, s.metered_s, s.usage_share_s, s.alloc_dominant_share_s,
    -- the grant: the annotation's figure, else the share ingest derived (HAMi's own limit;
    -- whole GPU = 1) times the GPU's memory
    coalesce(s.alloc_memory_bytes,
             round(s.alloc_mem_share * g.memory_total_bytes)::BIGINT) AS alloc_memory_bytes,
    coalesce(s.alloc_cores_ratio::DOUBLE, s.alloc_cores_share) AS alloc_cores_ratio,
    s.last_kernel_age_s::DOUBLE AS last_kernel_age_s,   -- NULL: never ran a kernel
    s.mem_q[1] AS mem_p50, s.mem_q[2] AS mem_p95, s.mem_q[3] AS mem_p99, s.mem_max,
    s.sm_q[1] AS sm_p50, s.sm_q[2] AS sm_p95, s.sm_q[3] AS sm_p99, s.sm_max
FROM per_slice s
LEFT JOIN gpu g ON g.gpu_uuid = s.gpu_uuid
LEFT JOIN tenant_namespace_overrides o
       ON o.cluster = s.cluster AND o.namespace = s.namespace
LEFT JOIN (SELECT cluster, any_value(tenant) AS tenant FROM cluster_tenant GROUP BY cluster) ct
       ON ct.cluster = s.cluster
ORDER BY cluster, node, s.gpu_uuid, s.pod_uid, s.container
