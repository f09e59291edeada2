-- A generated month of hourly rollups (tests and bench/bench_export.py): $gpus GPUs on
-- nodes of 8, nodes spread over $tenants tenants, 2-3 slices per GPU (some whole-GPU,
-- some oversubscribed GPUs, some idle workloads), a few unmetered and partly metered hours.
-- Pseudo-random but deterministic: everything derives from hash(gpu, hour, $seed).
INSERT OR REPLACE INTO tenants
SELECT 't' || k, 'Tenant ' || k, 'tenant-t' || k, 't' || k, 'https://t' || k || '.tenants.example:6443', 'CC-' || (1000 + k)
FROM range($tenants) r(k);

INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s, sample_count,
                      sm_util_s, memory_used_byte_s, energy_joules)
WITH g AS (
    SELECT i AS gpu, i // 8 AS node_i, (i // 8) % $tenants AS k, (hash(i, $seed) % 4)::BIGINT AS m
    FROM range($gpus) r(i)
), h AS (
    SELECT unnest(generate_series($m_start::TIMESTAMP, $m_end::TIMESTAMP - INTERVAL 1 HOUR, INTERVAL 1 HOUR)) AS hour
), gh AS (
    SELECT g.*, h.hour, hash(g.gpu, h.hour, $seed) AS r FROM g, h
)
SELECT hour, 'https://t' || k || '.tenants.example:6443', 'gpu-node-' || node_i, 'GPU-' || lpad(gpu::VARCHAR, 6, '0'),
       ['NVIDIA A100-SXM4-80GB', 'NVIDIA H100 80GB HBM3', 'NVIDIA L4', 'Tesla T4'][m + 1],
       [81920, 81559, 23034, 15360][m + 1]::BIGINT * 1048576,
       CASE WHEN r % 17 = 0 THEN 1800.0 + (r % 1700) ELSE 3600.0 END AS metered_s,
       360, 0, 0,
       (60 + r % 300) * CASE WHEN r % 17 = 0 THEN 1800.0 + (r % 1700) ELSE 3600.0 END
FROM gh
-- ~2 % of GPU-hours have no samples at all
WHERE r % 53 <> 0;

INSERT INTO slice_hour (hour, cluster, node, gpu_uuid, namespace, pod, pod_uid, container, whole_gpu,
    metered_s, sample_count, alloc_memory_bytes, alloc_cores_ratio, alloc_mem_share_s, alloc_cores_share_s,
    alloc_dominant_share_s, used_mem_share_s, used_sm_share_s, usage_share_s, memory_used_byte_s,
    hami_nvml_disagree_s)
WITH sl AS (
    SELECT g.hour, g.cluster, g.node, g.gpu_uuid, g.metered_s, g.memory_total_bytes,
           j, hash(g.gpu_uuid, j, $seed) AS sr, hash(g.gpu_uuid, j, g.hour, $seed) AS hr
    FROM gpu_hour g, range(3) s(j)
    WHERE g.hour >= $m_start::TIMESTAMP AND g.hour < $m_end::TIMESTAMP
      AND (j < 2 OR hash(g.gpu_uuid, $seed) % 2 = 0)          -- 2 or 3 slices per GPU
), p AS (
    SELECT *,
           sr % 11 = 0 AS whole,
           [0.25, 0.5, 0.25, 0.125, 0.75][(sr % 5)::BIGINT + 1] AS mem_share,
           [0.25, 0.25, 0.5, 0.3, 0.6][((sr // 5) % 5)::BIGINT + 1] AS core_share,
           CASE WHEN sr % 7 = 0 THEN 0.0 ELSE (hr % 100) / 100.0 END AS busy   -- 1 in 7 idles
    FROM sl
    WHERE hr % 9 <> 0                                            -- slices come and go
)
SELECT hour, cluster, node, gpu_uuid, 'ns-' || (sr % 3), 'pod-' || (sr % 100000), 'uid-' || sr, 'main', whole,
       metered_s, 360,
       (CASE WHEN whole THEN 1.0 ELSE mem_share END * memory_total_bytes)::BIGINT,
       CASE WHEN whole THEN 1.0 ELSE core_share END,
       CASE WHEN whole THEN 1.0 ELSE mem_share END * metered_s,
       CASE WHEN whole THEN 1.0 ELSE core_share END * metered_s,
       CASE WHEN whole THEN 1.0 ELSE greatest(mem_share, core_share) END * metered_s,
       CASE WHEN whole THEN 1.0 ELSE mem_share END * busy * metered_s,
       busy * CASE WHEN whole THEN 1.0 ELSE core_share END * metered_s,
       greatest(CASE WHEN whole THEN 1.0 ELSE mem_share END * busy, busy * CASE WHEN whole THEN 1.0 ELSE core_share END) * metered_s,
       CASE WHEN whole THEN 1.0 ELSE mem_share END * busy * metered_s * memory_total_bytes,
       CASE WHEN hr % 13 = 0 THEN 60.0 ELSE 0.0 END
FROM p;
