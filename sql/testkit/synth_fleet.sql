-- Synthetic month of a large fleet for bench/bench_recommend.py (never used by the product).
-- Parameters: nodes, gpn (GPUs per node), clusters (tenant clusters, a node belongs to
-- one), hours, start. 0-4 slices per GPU (about 2 on average, ~5 % of GPUs hold one
-- whole-GPU pod, one slice in ten ended half-way), one row per slice per hour. Values are deterministic (hash of ids).
CREATE OR REPLACE TEMP TABLE synth_gpu AS
SELECT
    n * $gpn + g AS gid,
    'https://t' || (n % $clusters) || '.tenants.example:6443' AS cluster,
    't' || (n % $clusters) AS tenant,
    'node-' || n AS node,
    'GPU-' || (n * $gpn + g) AS gpu_uuid,
    CASE (n % $clusters) % 4 WHEN 0 THEN 'NVIDIA H100 80GB HBM3' WHEN 3 THEN 'NVIDIA L4'
         ELSE 'NVIDIA A100-SXM4-80GB' END AS model,
    CASE (n % $clusters) % 4 WHEN 0 THEN 81559 WHEN 3 THEN 23034 ELSE 81920 END::BIGINT
        * 1048576 AS memory_total_bytes,
    hash(n * $gpn + g, 'whole') % 20 = 0 AS has_whole,
    hash(n * $gpn + g, 'k') % 5 AS k
FROM range($nodes) t(n), range($gpn) u(g);

CREATE OR REPLACE TEMP TABLE synth_slice AS
SELECT
    gp.*, j,
    'uid-' || gp.gid || '-' || j AS pod_uid,
    gp.has_whole AS whole_gpu,
    CASE WHEN gp.has_whole THEN 0.3 + (hash(gp.gid, j, 'm') % 1000) / 1000.0 * 0.6
         ELSE 0.03 + (hash(gp.gid, j, 'm') % 1000) / 1000.0 * 0.42 END AS mem_base,
    CASE WHEN gp.has_whole THEN 0.2 + (hash(gp.gid, j, 's') % 1000) / 1000.0 * 0.7
         ELSE 0.01 + (hash(gp.gid, j, 's') % 1000) / 1000.0 * 0.40 END AS sm_base,
    1.2 + (hash(gp.gid, j, 'a') % 1000) / 1000.0 * 1.8 AS over,
    -- one slice in ten is a job that ended half-way through the window
    CASE WHEN hash(gp.gid, j, 'end') % 10 = 0 THEN $hours // 2 ELSE $hours END AS end_h
FROM synth_gpu gp, range(4) s(j)
WHERE (gp.has_whole AND j = 0) OR (NOT gp.has_whole AND j < gp.k);

INSERT INTO tenants (tenant, display_name, api_server)
SELECT DISTINCT tenant, upper(tenant), cluster FROM synth_gpu
ON CONFLICT DO NOTHING;

-- columns named: ingest's migration 002 appended columns to gpu_hour
INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s, sample_count,
                      sm_util_s, memory_used_byte_s, energy_joules)
SELECT
    $start::TIMESTAMP + to_hours(h) AS hour, cluster, node, gpu_uuid, model, memory_total_bytes,
    3600.0, 360, 0.0, 0.0, 0.0
FROM synth_gpu, range($hours) r(h);

INSERT INTO slice_hour
SELECT
    hour, cluster, node, gpu_uuid, 'team-' || (gid % 7), 'pod-' || pod_uid, pod_uid, 'main',
    whole_gpu, 3600.0, 360,
    am::BIGINT, ac,
    3600.0 * am / memory_total_bytes, 3600.0 * ac, 3600.0 * greatest(am / memory_total_bytes, ac),
    3600.0 * mm / memory_total_bytes, 3600.0 * sm, 3600.0 * greatest(mm / memory_total_bytes, sm),
    3600.0 * mm, mp::BIGINT, least(1.0, sm * 1.3), 0.0,
    CASE WHEN sm_base < 0.02 THEN NULL ELSE (hash(pod_uid, h, 'age') % 600)::REAL END,
    epoch_ms(hour) + 3599000
FROM (
    SELECT *, $start::TIMESTAMP + to_hours(h) AS hour,
        CASE WHEN whole_gpu THEN memory_total_bytes::DOUBLE
             ELSE least(1.0, mem_base * over) * memory_total_bytes END AS am,
        CASE WHEN whole_gpu THEN 1.0 ELSE least(1.0, sm_base * over) END AS ac,
        mem_base * (0.55 + (hash(pod_uid, h, 'mm') % 1000) / 1000.0 * 0.35) * memory_total_bytes AS mm,
        mem_base * (0.70 + (hash(pod_uid, h, 'mp') % 1000) / 1000.0 * 0.30) * memory_total_bytes AS mp,
        sm_base * (0.50 + (hash(pod_uid, h, 'sm') % 1000) / 1000.0 * 0.50) AS sm
    FROM synth_slice, range($hours) r(h)
    WHERE h < end_h
) x;
