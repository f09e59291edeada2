-- Ingest semantics shared by the batch rollup (sql/ingest/apply_batch.sql) and the
-- from-scratch rebuild (sql/queries/*_from_raw.sql), plus reader views over the rollups.

-- HAMi's memory figure is written from inside the tenant's container; NVML's is the
-- driver's. They legitimately differ by a little (CUDA context bookkeeping), so only a gap
-- beyond max(128 MiB, 5 % of NVML's figure) counts as disagreement, and then NVML wins.
CREATE OR REPLACE TEMP MACRO memory_disagrees(hami, nvml) AS
    coalesce(hami IS NOT NULL AND nvml IS NOT NULL
             AND abs(hami - nvml) > greatest(134217728, 0.05 * nvml), false);
CREATE OR REPLACE TEMP MACRO trusted_memory(hami, nvml) AS
    CASE WHEN hami IS NULL OR memory_disagrees(hami, nvml) THEN nvml ELSE hami END;
-- A share of the GPU in [0, 1]; whole-GPU slices count 1.
CREATE OR REPLACE TEMP MACRO capped_share(whole, x) AS
    CASE WHEN coalesce(whole, false) THEN 1.0 ELSE coalesce(least(1.0, greatest(0.0, x)), 0.0) END;
-- Energy of a GPU-hour: counter delta plus the first sample's own interval (power × dt);
-- power × dt throughout where the counter is missing or went backwards (driver reset).
CREATE OR REPLACE TEMP MACRO hour_energy(first_e, last_e, first_p, power_j) AS
    CASE WHEN first_e IS NOT NULL AND last_e >= first_e
         THEN last_e - first_e + coalesce(first_p, 0.0) ELSE power_j END;

-- Raw samples with their strings back (the tables hold ids: 002_ingest_raw_rollups.sql).
CREATE OR REPLACE TEMP VIEW raw_gpu AS
SELECT r.ts_ms, r.interval_ms, n.value AS node, c.value AS cluster, g.value AS gpu_uuid, r.gpu_index,
       m.value AS model, r.memory_total_bytes, r.memory_used_bytes, r.sm_util_ratio, r.mem_util_ratio,
       r.power_watts, r.energy_joules, r.slice_count
FROM raw_gpu_rows r
JOIN ingest_strings n ON n.id = r.node_id
JOIN ingest_strings c ON c.id = r.cluster_id
JOIN ingest_strings g ON g.id = r.gpu_uuid_id
LEFT JOIN ingest_strings m ON m.id = r.model_id;

CREATE OR REPLACE TEMP VIEW raw_slice AS
SELECT r.ts_ms, r.interval_ms, n.value AS node, c.value AS cluster, u.value AS pod_uid, p.value AS pod,
       ns.value AS namespace, k.value AS container, g.value AS gpu_uuid, r.vdevice_index,
       r.hami_memory_limit_bytes, r.hami_memory_used_bytes, r.hami_context_bytes, r.hami_module_bytes,
       r.hami_buffer_bytes, r.sm_limit_ratio, r.sm_util_ratio, r.last_kernel_age_s, r.process_count,
       r.nvml_memory_used_bytes, r.alloc_memory_bytes, r.alloc_cores_ratio, r.whole_gpu, src.value AS source
FROM raw_slice_rows r
JOIN ingest_strings n ON n.id = r.node_id
JOIN ingest_strings c ON c.id = r.cluster_id
JOIN ingest_strings u ON u.id = r.pod_uid_id
JOIN ingest_strings k ON k.id = r.container_id
JOIN ingest_strings g ON g.id = r.gpu_uuid_id
LEFT JOIN ingest_strings p ON p.id = r.pod_id
LEFT JOIN ingest_strings ns ON ns.id = r.namespace_id
LEFT JOIN ingest_strings src ON src.id = r.source_id;

CREATE OR REPLACE TEMP VIEW gpu_inventory_named AS
SELECT g.value AS gpu_uuid, c.value AS cluster, n.value AS node, i.gpu_index, m.value AS model,
       i.memory_total_bytes, make_timestamp(i.first_seen_ms * 1000) AS first_seen,
       make_timestamp(i.last_seen_ms * 1000) AS last_seen
FROM gpu_inventory i
JOIN ingest_strings g ON g.id = i.gpu_uuid_id
JOIN ingest_strings c ON c.id = i.cluster_id
JOIN ingest_strings n ON n.id = i.node_id
LEFT JOIN ingest_strings m ON m.id = i.model_id;

-- Minute rollups: partials merged, strings resolved.
CREATE OR REPLACE TEMP VIEW gpu_minute AS
SELECT d.minute, g.value AS gpu_uuid, c.value AS cluster, n.value AS node, m.value AS model,
       d.memory_total_bytes, d.metered_s, d.sample_count, d.sm_util_s, d.memory_used_byte_s,
       d.energy_joules, d.latest_ts_ms
FROM (
    SELECT minute, gpu_uuid_id,
           arg_max(cluster_id, latest_ts_ms) AS cluster_id, arg_max(node_id, latest_ts_ms) AS node_id,
           arg_max(model_id, latest_ts_ms) AS model_id, arg_max(memory_total_bytes, latest_ts_ms) AS memory_total_bytes,
           sum(metered_s) AS metered_s, sum(sample_count) AS sample_count, sum(sm_util_s) AS sm_util_s,
           sum(memory_used_byte_s) AS memory_used_byte_s,
           hour_energy(arg_min(first_energy_j, first_ts_ms), arg_max(last_energy_j, last_ts_ms),
                       arg_min(first_power_j, first_ts_ms), sum(power_j)) AS energy_joules,
           max(latest_ts_ms) AS latest_ts_ms
    FROM gpu_minute_part GROUP BY minute, gpu_uuid_id
) d
JOIN ingest_strings g ON g.id = d.gpu_uuid_id
JOIN ingest_strings c ON c.id = d.cluster_id
JOIN ingest_strings n ON n.id = d.node_id
LEFT JOIN ingest_strings m ON m.id = d.model_id;

CREATE OR REPLACE TEMP VIEW slice_minute AS
SELECT d.minute, c.value AS cluster, n.value AS node, g.value AS gpu_uuid, ns.value AS namespace,
       p.value AS pod, u.value AS pod_uid, k.value AS container, d.* EXCLUDE (minute, gpu_uuid_id, pod_uid_id,
       container_id, cluster_id, node_id, namespace_id, pod_id)
FROM (
    SELECT minute, gpu_uuid_id, pod_uid_id, container_id,
           arg_max(cluster_id, latest_ts_ms) AS cluster_id, arg_max(node_id, latest_ts_ms) AS node_id,
           arg_max(namespace_id, latest_ts_ms) AS namespace_id, arg_max(pod_id, latest_ts_ms) AS pod_id,
           bool_or(whole_gpu) AS whole_gpu, sum(metered_s) AS metered_s, sum(sample_count) AS sample_count,
           arg_max(alloc_memory_bytes, latest_ts_ms) AS alloc_memory_bytes,
           arg_max(alloc_cores_ratio, latest_ts_ms) AS alloc_cores_ratio,
           sum(alloc_mem_share_s) AS alloc_mem_share_s, sum(alloc_cores_share_s) AS alloc_cores_share_s,
           sum(alloc_dominant_share_s) AS alloc_dominant_share_s, sum(used_mem_share_s) AS used_mem_share_s,
           sum(used_sm_share_s) AS used_sm_share_s, sum(usage_share_s) AS usage_share_s,
           sum(memory_used_byte_s) AS memory_used_byte_s, max(memory_used_max_bytes) AS memory_used_max_bytes,
           max(sm_util_max) AS sm_util_max, sum(hami_nvml_disagree_s) AS hami_nvml_disagree_s,
           arg_max_null(last_kernel_age_s, latest_ts_ms) AS last_kernel_age_s, max(latest_ts_ms) AS latest_ts_ms
    FROM slice_minute_part GROUP BY minute, gpu_uuid_id, pod_uid_id, container_id
) d
JOIN ingest_strings g ON g.id = d.gpu_uuid_id
JOIN ingest_strings u ON u.id = d.pod_uid_id
JOIN ingest_strings k ON k.id = d.container_id
JOIN ingest_strings c ON c.id = d.cluster_id
JOIN ingest_strings n ON n.id = d.node_id
LEFT JOIN ingest_strings ns ON ns.id = d.namespace_id
LEFT JOIN ingest_strings p ON p.id = d.pod_id;

-- Unmetered time made visible: every hour between a GPU's first and last metered hour
-- with less than 3600 metered seconds (0 where no sample arrived at all).
CREATE OR REPLACE TEMP VIEW gpu_hour_gaps AS
WITH span AS (
    SELECT gpu_uuid, min(hour) AS first_hour, max(hour) AS last_hour FROM gpu_hour GROUP BY gpu_uuid
), hours AS (
    SELECT gpu_uuid, unnest(range(first_hour, last_hour + INTERVAL 1 HOUR, INTERVAL 1 HOUR)) AS hour FROM span
)
SELECT h.hour, h.gpu_uuid, i.cluster, i.node, i.model,
       coalesce(g.metered_s, 0) AS metered_s, 3600 - coalesce(g.metered_s, 0) AS unmetered_s
FROM hours h
LEFT JOIN gpu_hour g ON g.hour = h.hour AND g.gpu_uuid = h.gpu_uuid
LEFT JOIN gpu_inventory_named i ON i.gpu_uuid = h.gpu_uuid
WHERE coalesce(g.metered_s, 0) < 3600;
