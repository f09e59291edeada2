-- A check written apart from the dashboard's SQL (bench/bench_browser_8000.py and
-- tests/test_dashboard_browser_filters.py): each GPU of tenant $tenant in [$start, $end),
-- straight from the hourly rollups, with what its slices were allocated but did not use, in
-- integer milliseconds of the whole GPU (each slice-hour's max(allocation - usage, 0) rounded
-- to the millisecond), and the GPU's label as the GPUs page writes it (node · the UUID's
-- first 8 characters after "GPU-").
-- A GPU whose slices left no row has 0 ms.
WITH placed AS (
    SELECT DISTINCT g.gpu_uuid, g.node, g.cluster, g.model
    FROM gpu_hour g JOIN tenants t ON t.api_server = g.cluster
    WHERE t.tenant = $tenant AND g.hour >= $start AND g.hour < $end
), unused AS (
    SELECT gpu_uuid, sum(round(greatest(alloc_dominant_share_s - usage_share_s, 0) * 1000))::BIGINT AS unused_ms
    FROM slice_hour
    WHERE hour >= $start AND hour < $end
    GROUP BY gpu_uuid
)
SELECT p.node || ' · ' || substr(p.gpu_uuid, 5, 8) AS label, p.gpu_uuid, p.model, p.node, p.cluster,
       coalesce(u.unused_ms, 0) AS unused_ms
FROM placed p LEFT JOIN unused u USING (gpu_uuid);
