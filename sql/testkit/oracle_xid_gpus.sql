-- A check written apart from the dashboard's SQL (bench/bench_browser_8000.py and
-- tests/test_dashboard_browser_filters.py): every GPU with a critical Xid in [$start, $end),
-- straight from gpu_hour, labelled as the GPUs page labels it (node · the UUID's first 8
-- characters after "GPU-").
SELECT DISTINCT node || ' · ' || substr(gpu_uuid, 5, 8) AS label, gpu_uuid
FROM gpu_hour
WHERE xid_critical_count > 0 AND hour >= $start AND hour < $end;
