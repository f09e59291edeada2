-- A generated month of raw samples (bench/bench_reader_refresh.py): $gpus GPUs on nodes of
-- 4, $slices slices spread over them, a sample of each every $interval_ms from $start_ms
-- for $days days, with their strings and the GPU inventory. Pseudo-random but
-- deterministic (hash of the row), so the columns compress like real readings do, not
-- like constants.
INSERT INTO ingest_strings
SELECT 100 + n, 'gpu-node-' || n FROM range(($gpus + 3) // 4) r(n)
UNION ALL SELECT 200 + c, 'https://t' || c || '.tenants.example:6443' FROM range(3) r(c)
UNION ALL SELECT 300 + m, ['NVIDIA A100-SXM4-80GB', 'NVIDIA H100 80GB HBM3'][m + 1] FROM range(2) r(m)
UNION ALL SELECT 1000 + g, 'GPU-' || md5(g::VARCHAR) FROM range($gpus) r(g)
UNION ALL SELECT 2000 + s, md5('uid' || s) FROM range($slices) r(s)
UNION ALL SELECT 3000 + s, 'pod-' || s FROM range($slices) r(s)
UNION ALL SELECT 4000 + s, 'container-' || (s % 3) || '-' || s FROM range($slices) r(s)
UNION ALL SELECT 5000 + x, 'namespace-' || x FROM range(3) r(x)
UNION ALL SELECT 6000, 'hami';

INSERT INTO gpu_inventory
SELECT 1000 + g, 200 + (g // 4) % 3, 100 + g // 4, g % 4, 300 + g % 2, 85899345920,
       $start_ms, $start_ms + $days::BIGINT * 86400000 - $interval_ms
FROM range($gpus) r(g);

INSERT INTO raw_gpu_rows
SELECT $start_ms + t * $interval_ms, $interval_ms, 100 + g // 4, 200 + (g // 4) % 3, 1000 + g, g % 4, 300 + g % 2,
       85899345920, (hash(g, t) % 85899345920)::BIGINT, (hash(t, g) % 1000) / 1000.0, (hash(g, t, 1) % 1000) / 1000.0,
       60 + (hash(g, t, 2) % 30000) / 100.0, 1e9 + t * 1500.0 + (hash(g, t, 3) % 1000), 2
FROM range($days::BIGINT * 86400000 // $interval_ms) b(t), range($gpus) a(g) ORDER BY t, g;

INSERT INTO raw_slice_rows
SELECT $start_ms + t * $interval_ms, $interval_ms, 100 + (s % $gpus) // 4, 200 + ((s % $gpus) // 4) % 3,
       2000 + s, 3000 + s, 5000 + s % 3, 4000 + s, 1000 + s % $gpus, 0,
       21474836480, (hash(s, t) % 21474836480)::BIGINT, 314572800, 8388608, (hash(s, t, 1) % 2147483648)::BIGINT,
       0.25, (hash(s, t, 2) % 1000) / 4000.0, (hash(s, t, 3) % 600)::REAL, 1,
       (hash(s, t, 4) % 21474836480)::BIGINT, 21474836480, 0.25, false, 6000, true
FROM range($days::BIGINT * 86400000 // $interval_ms) b(t), range($slices) a(s) ORDER BY t, s;

-- the hour rollups of these samples, folded as ingest folds a batch's deltas
INSERT INTO gpu_hour_pending SELECT bucket AS hour, * EXCLUDE (bucket)
FROM gpu_rollup('raw_gpu_rows', 3600000, 9223372036854775807);

INSERT INTO slice_hour_pending SELECT bucket AS hour, * EXCLUDE (bucket)
FROM slice_rollup('raw_slice_rows', 'gpu_inventory', 3600000, 9223372036854775807);
