-- One ingest batch, run inside the transaction that also stores the Kafka offsets.
-- Inputs (Arrow, registered by ingest/writer.py): batch_strings (id, value) new string ids,
-- batch_gpu and batch_slice (slicemeter.tick columns, strings replaced by *_id integers).
-- Everything is set-based over the batch: append raw rows, refresh the GPU inventory,
-- aggregate the batch into minute partials (appended) and hour deltas (upserted).

INSERT INTO ingest_strings SELECT id, value FROM batch_strings;
INSERT INTO raw_gpu_rows BY NAME SELECT * FROM batch_gpu;
INSERT INTO raw_slice_rows BY NAME SELECT * FROM batch_slice;

INSERT INTO gpu_inventory
SELECT gpu_uuid_id, arg_max(cluster_id, ts_ms), arg_max(node_id, ts_ms), arg_max(gpu_index, ts_ms),
       arg_max(model_id, ts_ms), arg_max(memory_total_bytes, ts_ms), min(ts_ms), max(ts_ms)
FROM batch_gpu GROUP BY gpu_uuid_id
ON CONFLICT (gpu_uuid_id) DO UPDATE SET
    cluster_id = CASE WHEN excluded.last_seen_ms >= gpu_inventory.last_seen_ms THEN excluded.cluster_id ELSE gpu_inventory.cluster_id END,
    node_id = CASE WHEN excluded.last_seen_ms >= gpu_inventory.last_seen_ms THEN excluded.node_id ELSE gpu_inventory.node_id END,
    gpu_index = CASE WHEN excluded.last_seen_ms >= gpu_inventory.last_seen_ms THEN excluded.gpu_index ELSE gpu_inventory.gpu_index END,
    model_id = coalesce(CASE WHEN excluded.last_seen_ms >= gpu_inventory.last_seen_ms THEN excluded.model_id END,
                        gpu_inventory.model_id, excluded.model_id),
    memory_total_bytes = coalesce(CASE WHEN excluded.last_seen_ms >= gpu_inventory.last_seen_ms THEN excluded.memory_total_bytes END,
                                  gpu_inventory.memory_total_bytes, excluded.memory_total_bytes),
    first_seen_ms = least(gpu_inventory.first_seen_ms, excluded.first_seen_ms),
    last_seen_ms = greatest(gpu_inventory.last_seen_ms, excluded.last_seen_ms);

CREATE OR REPLACE TEMP TABLE gpu_minute_delta AS
SELECT make_timestamp(ts_ms // 60000 * 60000000) AS minute, gpu_uuid_id,
       any_value(cluster_id) AS cluster_id, any_value(node_id) AS node_id,
       any_value(model_id) AS model_id, max(memory_total_bytes) AS memory_total_bytes,
       sum(interval_ms) / 1000.0 AS metered_s, count(*) AS sample_count,
       sum(sm_util_ratio * interval_ms) / 1000.0 AS sm_util_s,
       sum(memory_used_bytes::DOUBLE * interval_ms) / 1000.0 AS memory_used_byte_s,
       sum(power_watts * interval_ms) / 1000.0 AS power_j,
       min(ts_ms) FILTER (WHERE energy_joules IS NOT NULL) AS first_ts_ms,
       arg_min(energy_joules, ts_ms) AS first_energy_j,
       arg_min(power_watts * interval_ms / 1000.0, ts_ms) FILTER (WHERE energy_joules IS NOT NULL) AS first_power_j,
       max(ts_ms) FILTER (WHERE energy_joules IS NOT NULL) AS last_ts_ms,
       arg_max(energy_joules, ts_ms) AS last_energy_j,
       max(ts_ms) AS latest_ts_ms
FROM batch_gpu GROUP BY ALL;

INSERT INTO gpu_minute_part BY NAME SELECT * FROM gpu_minute_delta;

-- Per-sample shares (semantics: sql/schema/001_contract.sql), summed per slice-minute.
-- cluster/node/namespace/pod are fixed for a (GPU, pod UID) within a minute: any_value.
CREATE OR REPLACE TEMP TABLE slice_minute_delta AS
WITH s AS (
    SELECT b.*, b.interval_ms / 1000.0 AS dt,
           capped_share(b.whole_gpu, coalesce(b.alloc_memory_bytes, b.hami_memory_limit_bytes) / i.memory_total_bytes) AS a_mem,
           capped_share(b.whole_gpu, coalesce(b.alloc_cores_ratio, b.sm_limit_ratio)) AS a_cores,
           trusted_memory(b.hami_memory_used_bytes, b.nvml_memory_used_bytes) AS mem_used,
           capped_share(false, trusted_memory(b.hami_memory_used_bytes, b.nvml_memory_used_bytes) / i.memory_total_bytes) AS u_mem,
           capped_share(false, b.sm_util_ratio) AS u_sm,
           memory_disagrees(b.hami_memory_used_bytes, b.nvml_memory_used_bytes) AS disagree
    FROM batch_slice b LEFT JOIN gpu_inventory i ON i.gpu_uuid_id = b.gpu_uuid_id
)
SELECT make_timestamp(ts_ms // 60000 * 60000000) AS minute, gpu_uuid_id, pod_uid_id, container_id,
       any_value(cluster_id) AS cluster_id, any_value(node_id) AS node_id,
       any_value(namespace_id) AS namespace_id, any_value(pod_id) AS pod_id,
       bool_or(coalesce(whole_gpu, false)) AS whole_gpu, sum(dt) AS metered_s, count(*) AS sample_count,
       arg_max(alloc_memory_bytes, ts_ms) AS alloc_memory_bytes, arg_max(alloc_cores_ratio, ts_ms) AS alloc_cores_ratio,
       sum(a_mem * dt) AS alloc_mem_share_s, sum(a_cores * dt) AS alloc_cores_share_s,
       sum(greatest(a_mem, a_cores) * dt) AS alloc_dominant_share_s,
       sum(u_mem * dt) AS used_mem_share_s, sum(u_sm * dt) AS used_sm_share_s,
       sum(greatest(u_mem, u_sm) * dt) AS usage_share_s,
       sum(mem_used * dt) AS memory_used_byte_s, max(mem_used) AS memory_used_max_bytes,
       max(sm_util_ratio) AS sm_util_max, sum(CASE WHEN disagree THEN dt ELSE 0 END) AS hami_nvml_disagree_s,
       arg_max_null(last_kernel_age_s, ts_ms) AS last_kernel_age_s, max(ts_ms) AS latest_ts_ms
FROM s GROUP BY minute, gpu_uuid_id, pod_uid_id, container_id;

INSERT INTO slice_minute_part BY NAME SELECT * FROM slice_minute_delta;

-- Hour deltas from the minute deltas (60x fewer rows than the batch), named, upserted.
INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s, sample_count,
                      sm_util_s, memory_used_byte_s, energy_joules, power_j, first_ts_ms, first_energy_j,
                      first_power_j, last_ts_ms, last_energy_j, latest_ts_ms)
SELECT d.hour, c.value, n.value, g.value, m.value, d.memory_total_bytes, d.metered_s, d.sample_count,
       d.sm_util_s, d.memory_used_byte_s, NULL, d.power_j, d.first_ts_ms, d.first_energy_j,
       d.first_power_j, d.last_ts_ms, d.last_energy_j, d.latest_ts_ms
FROM (
    SELECT date_trunc('hour', minute) AS hour, gpu_uuid_id,
           arg_max(cluster_id, latest_ts_ms) AS cluster_id, arg_max(node_id, latest_ts_ms) AS node_id,
           arg_max(model_id, latest_ts_ms) AS model_id, arg_max(memory_total_bytes, latest_ts_ms) AS memory_total_bytes,
           least(3600, sum(metered_s)) AS metered_s, sum(sample_count) AS sample_count, sum(sm_util_s) AS sm_util_s,
           sum(memory_used_byte_s) AS memory_used_byte_s, sum(power_j) AS power_j,
           min(first_ts_ms) AS first_ts_ms, arg_min(first_energy_j, first_ts_ms) AS first_energy_j,
           arg_min(first_power_j, first_ts_ms) AS first_power_j,
           max(last_ts_ms) AS last_ts_ms, arg_max(last_energy_j, last_ts_ms) AS last_energy_j,
           max(latest_ts_ms) AS latest_ts_ms
    FROM gpu_minute_delta GROUP BY ALL
) d
JOIN ingest_strings c ON c.id = d.cluster_id
JOIN ingest_strings n ON n.id = d.node_id
JOIN ingest_strings g ON g.id = d.gpu_uuid_id
LEFT JOIN ingest_strings m ON m.id = d.model_id
ON CONFLICT (hour, gpu_uuid) DO UPDATE SET
    cluster = CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.cluster ELSE gpu_hour.cluster END,
    node = CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.node ELSE gpu_hour.node END,
    model = coalesce(CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.model END, gpu_hour.model, excluded.model),
    memory_total_bytes = coalesce(CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.memory_total_bytes END,
                                  gpu_hour.memory_total_bytes, excluded.memory_total_bytes),
    metered_s = least(3600, gpu_hour.metered_s + excluded.metered_s),
    sample_count = gpu_hour.sample_count + excluded.sample_count,
    sm_util_s = coalesce(gpu_hour.sm_util_s, 0) + coalesce(excluded.sm_util_s, 0),
    memory_used_byte_s = coalesce(gpu_hour.memory_used_byte_s, 0) + coalesce(excluded.memory_used_byte_s, 0),
    power_j = coalesce(gpu_hour.power_j, 0) + coalesce(excluded.power_j, 0),
    first_energy_j = CASE WHEN gpu_hour.first_ts_ms IS NULL OR excluded.first_ts_ms < gpu_hour.first_ts_ms
                          THEN excluded.first_energy_j ELSE gpu_hour.first_energy_j END,
    first_power_j = CASE WHEN gpu_hour.first_ts_ms IS NULL OR excluded.first_ts_ms < gpu_hour.first_ts_ms
                         THEN excluded.first_power_j ELSE gpu_hour.first_power_j END,
    first_ts_ms = least(gpu_hour.first_ts_ms, excluded.first_ts_ms),
    last_energy_j = CASE WHEN gpu_hour.last_ts_ms IS NULL OR excluded.last_ts_ms > gpu_hour.last_ts_ms
                         THEN excluded.last_energy_j ELSE gpu_hour.last_energy_j END,
    last_ts_ms = greatest(gpu_hour.last_ts_ms, excluded.last_ts_ms),
    latest_ts_ms = greatest(gpu_hour.latest_ts_ms, excluded.latest_ts_ms);

UPDATE gpu_hour SET energy_joules = hour_energy(first_energy_j, last_energy_j, first_power_j, power_j)
FROM (SELECT DISTINCT date_trunc('hour', d.minute) AS h, s.value AS g
      FROM gpu_minute_delta d JOIN ingest_strings s ON s.id = d.gpu_uuid_id) d
WHERE gpu_hour.hour = d.h AND gpu_hour.gpu_uuid = d.g;

INSERT INTO slice_hour
SELECT d.hour, c.value, n.value, g.value, ns.value, p.value, u.value, k.value, d.whole_gpu,
       d.metered_s, d.sample_count, d.alloc_memory_bytes, d.alloc_cores_ratio,
       d.alloc_mem_share_s, d.alloc_cores_share_s, d.alloc_dominant_share_s,
       d.used_mem_share_s, d.used_sm_share_s, d.usage_share_s, d.memory_used_byte_s,
       d.memory_used_max_bytes, d.sm_util_max, d.hami_nvml_disagree_s, d.last_kernel_age_s, d.latest_ts_ms
FROM (
    SELECT date_trunc('hour', minute) AS hour, gpu_uuid_id, pod_uid_id, container_id,
           arg_max(cluster_id, latest_ts_ms) AS cluster_id, arg_max(node_id, latest_ts_ms) AS node_id,
           arg_max(namespace_id, latest_ts_ms) AS namespace_id, arg_max(pod_id, latest_ts_ms) AS pod_id,
           bool_or(whole_gpu) AS whole_gpu, least(3600, sum(metered_s)) AS metered_s, sum(sample_count) AS sample_count,
           arg_max(alloc_memory_bytes, latest_ts_ms) AS alloc_memory_bytes,
           arg_max(alloc_cores_ratio, latest_ts_ms) AS alloc_cores_ratio,
           sum(alloc_mem_share_s) AS alloc_mem_share_s, sum(alloc_cores_share_s) AS alloc_cores_share_s,
           sum(alloc_dominant_share_s) AS alloc_dominant_share_s, sum(used_mem_share_s) AS used_mem_share_s,
           sum(used_sm_share_s) AS used_sm_share_s, sum(usage_share_s) AS usage_share_s,
           sum(memory_used_byte_s) AS memory_used_byte_s, max(memory_used_max_bytes) AS memory_used_max_bytes,
           max(sm_util_max) AS sm_util_max, sum(hami_nvml_disagree_s) AS hami_nvml_disagree_s,
           arg_max_null(last_kernel_age_s, latest_ts_ms) AS last_kernel_age_s, max(latest_ts_ms) AS latest_ts_ms
    FROM slice_minute_delta GROUP BY ALL
) d
JOIN ingest_strings c ON c.id = d.cluster_id
JOIN ingest_strings n ON n.id = d.node_id
JOIN ingest_strings g ON g.id = d.gpu_uuid_id
JOIN ingest_strings u ON u.id = d.pod_uid_id
JOIN ingest_strings k ON k.id = d.container_id
LEFT JOIN ingest_strings ns ON ns.id = d.namespace_id
LEFT JOIN ingest_strings p ON p.id = d.pod_id
ON CONFLICT (hour, gpu_uuid, pod_uid, container) DO UPDATE SET
    cluster = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN excluded.cluster ELSE slice_hour.cluster END,
    node = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN excluded.node ELSE slice_hour.node END,
    namespace = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN excluded.namespace ELSE slice_hour.namespace END,
    pod = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN excluded.pod ELSE slice_hour.pod END,
    whole_gpu = slice_hour.whole_gpu OR excluded.whole_gpu,
    metered_s = least(3600, slice_hour.metered_s + excluded.metered_s),
    sample_count = slice_hour.sample_count + excluded.sample_count,
    alloc_memory_bytes = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN excluded.alloc_memory_bytes ELSE slice_hour.alloc_memory_bytes END,
    alloc_cores_ratio = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN excluded.alloc_cores_ratio ELSE slice_hour.alloc_cores_ratio END,
    alloc_mem_share_s = slice_hour.alloc_mem_share_s + excluded.alloc_mem_share_s,
    alloc_cores_share_s = slice_hour.alloc_cores_share_s + excluded.alloc_cores_share_s,
    alloc_dominant_share_s = slice_hour.alloc_dominant_share_s + excluded.alloc_dominant_share_s,
    used_mem_share_s = slice_hour.used_mem_share_s + excluded.used_mem_share_s,
    used_sm_share_s = slice_hour.used_sm_share_s + excluded.used_sm_share_s,
    usage_share_s = slice_hour.usage_share_s + excluded.usage_share_s,
    memory_used_byte_s = coalesce(slice_hour.memory_used_byte_s, 0) + coalesce(excluded.memory_used_byte_s, 0),
    memory_used_max_bytes = greatest(slice_hour.memory_used_max_bytes, excluded.memory_used_max_bytes),
    sm_util_max = greatest(slice_hour.sm_util_max, excluded.sm_util_max),
    hami_nvml_disagree_s = slice_hour.hami_nvml_disagree_s + excluded.hami_nvml_disagree_s,
    last_kernel_age_s = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN excluded.last_kernel_age_s ELSE slice_hour.last_kernel_age_s END,
    latest_ts_ms = greatest(slice_hour.latest_ts_ms, excluded.latest_ts_ms);
