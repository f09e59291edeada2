-- The fleet's GPUs over a window [$start, $end): every GPU metered in the window, with
-- where it sits (a node belongs to one tenant cluster), its model and capacity. GPUs seen
-- only in slice_hour (no gpu_hour row) still count: they hold slices.
WITH g AS (
    SELECT gpu_uuid, arg_max(cluster, hour) AS cluster, arg_max(node, hour) AS node,
           arg_max(model, hour) AS model, arg_max(memory_total_bytes, hour) AS memory_total_bytes,
           sum(metered_s) AS metered_s, count(*) AS hours
    FROM gpu_hour WHERE hour >= $start AND hour < $end
    GROUP BY gpu_uuid
),
s AS (
    SELECT gpu_uuid, arg_max(cluster, hour) AS cluster, arg_max(node, hour) AS node
    FROM slice_hour WHERE hour >= $start AND hour < $end AND metered_s > 0
    GROUP BY gpu_uuid
)
SELECT
    coalesce(ct.tenant, 'unassigned') AS tenant,
    x.cluster, x.node, x.gpu_uuid, x.model, x.memory_total_bytes, x.metered_s, x.hours
FROM (
    SELECT coalesce(g.gpu_uuid, s.gpu_uuid) AS gpu_uuid,
           coalesce(g.cluster, s.cluster) AS cluster,
           coalesce(g.node, s.node) AS node,
           g.model, g.memory_total_bytes, coalesce(g.metered_s, 0) AS metered_s,
           coalesce(g.hours, 0) AS hours
    FROM g FULL OUTER JOIN s ON g.gpu_uuid = s.gpu_uuid
) x
LEFT JOIN (SELECT cluster, any_value(tenant) AS tenant FROM cluster_tenant GROUP BY cluster) ct
       ON ct.cluster = x.cluster
ORDER BY x.cluster, x.node, x.gpu_uuid
