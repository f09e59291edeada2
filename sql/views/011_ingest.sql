-- Ingest semantics shared by the batch rollup (sql/ingest/apply_batch.sql) and the
-- from-scratch rebuild (sql/testkit/*_from_raw.sql), plus reader views over the rollups.

-- HAMi's memory figure is written from inside the tenant's container; NVML's is the
-- driver's. They legitimately differ by a little (CUDA context bookkeeping), so only a gap
-- beyond max(128 MiB, 5 % of NVML's figure) counts as disagreement, and then NVML wins.
-- (Literals are typed DOUBLE on purpose: an untyped 0.05 is a DECIMAL in DuckDB, and
-- decimal arithmetic on every sample measured 4x slower.)
CREATE OR REPLACE TEMP MACRO memory_disagrees(hami, nvml) AS
    coalesce(abs(hami - nvml)::DOUBLE > greatest(134217728.0::DOUBLE, 0.05::DOUBLE * nvml), false);
CREATE OR REPLACE TEMP MACRO trusted_memory(hami, nvml) AS
    CASE WHEN hami IS NULL OR memory_disagrees(hami, nvml) THEN nvml ELSE hami END;
-- A share of the GPU in [0, 1]; whole-GPU slices count 1.
CREATE OR REPLACE TEMP MACRO capped_share(whole, x) AS
    CASE WHEN whole THEN 1.0::DOUBLE ELSE coalesce(least(1.0::DOUBLE, greatest(0.0::DOUBLE, x::DOUBLE)), 0.0::DOUBLE) END;
-- The core share a slice was granted: the grant's, else the HAMi region's sm_limit only when
-- it is a real limit (0 < x < 1): HAMi-core writes 100 % when the pod has no core limit.
CREATE OR REPLACE TEMP MACRO granted_cores(alloc_cores, sm_limit) AS
    coalesce(alloc_cores, CASE WHEN sm_limit > 0.0::DOUBLE AND sm_limit < 1.0::DOUBLE THEN sm_limit END);
-- Energy of a GPU-hour: counter delta plus the first sample's own interval (power x dt),
-- power x dt throughout where the counter is missing or went backwards (driver reset).
CREATE OR REPLACE TEMP MACRO hour_energy(first_e, last_e, first_p, power_j) AS
    CASE WHEN first_e IS NOT NULL AND last_e >= first_e
         THEN last_e - first_e + coalesce(first_p, 0.0::DOUBLE) ELSE power_j END;

-- Raw samples with their strings back (the tables hold ids: 002_ingest_raw_rollups.sql).
CREATE OR REPLACE TEMP VIEW raw_gpu AS
SELECT r.ts_ms, r.interval_ms, n.value AS node, c.value AS cluster, g.value AS gpu_uuid, r.gpu_index,
       m.value AS model, r.memory_total_bytes, r.memory_used_bytes, r.sm_util_ratio, r.mem_util_ratio,
       r.power_watts, r.energy_joules, r.slice_count, dr.value AS driver
FROM raw_gpu_rows r
JOIN ingest_strings n ON n.id = r.node_id
JOIN ingest_strings c ON c.id = r.cluster_id
JOIN ingest_strings g ON g.id = r.gpu_uuid_id
LEFT JOIN ingest_strings m ON m.id = r.model_id
LEFT JOIN ingest_strings dr ON dr.id = r.driver_id;

-- Every stored slice row: whole row groups and the rows held back
-- (sql/schema/003_raw_slice_tail.sql).
CREATE OR REPLACE TEMP VIEW raw_slice_stored AS
SELECT * FROM raw_slice_rows UNION ALL SELECT * FROM raw_slice_tail;

CREATE OR REPLACE TEMP VIEW raw_slice AS
SELECT r.ts_ms, r.interval_ms, n.value AS node, c.value AS cluster, u.value AS pod_uid, p.value AS pod,
       ns.value AS namespace, k.value AS container, g.value AS gpu_uuid, r.vdevice_index,
       r.hami_memory_limit_bytes, r.hami_memory_used_bytes, r.hami_context_bytes, r.hami_module_bytes,
       r.hami_buffer_bytes, r.sm_limit_ratio, r.sm_util_ratio, r.last_kernel_age_s, r.process_count,
       r.nvml_memory_used_bytes, r.alloc_memory_bytes, r.alloc_cores_ratio, r.whole_gpu, src.value AS source,
       r.usage_verified, cl.value AS claim, cu.value AS claim_uid, dr.value AS driver, r.alloc_mem_share_ratio,
       r.alloc_cores_share_ratio
FROM raw_slice_stored r
JOIN ingest_strings n ON n.id = r.node_id
JOIN ingest_strings c ON c.id = r.cluster_id
JOIN ingest_strings u ON u.id = r.pod_uid_id
JOIN ingest_strings k ON k.id = r.container_id
JOIN ingest_strings g ON g.id = r.gpu_uuid_id
LEFT JOIN ingest_strings p ON p.id = r.pod_id
LEFT JOIN ingest_strings ns ON ns.id = r.namespace_id
LEFT JOIN ingest_strings src ON src.id = r.source_id
LEFT JOIN ingest_strings cl ON cl.id = r.claim_id
LEFT JOIN ingest_strings cu ON cu.id = r.claim_uid_id
LEFT JOIN ingest_strings dr ON dr.id = r.driver_id;

-- gpu_inventory with the rows batches left pending (sql/schema/004_pending_rollups.sql):
-- the latest row of each GPU, which includes the ones before it (sql/ingest/batch_inventory.sql).
CREATE OR REPLACE TEMP VIEW gpu_inventory_latest AS
SELECT * FROM (SELECT * FROM gpu_inventory UNION ALL BY NAME SELECT * FROM gpu_inventory_pending)
QUALIFY row_number() OVER (PARTITION BY gpu_uuid_id ORDER BY last_seen_ms DESC, first_seen_ms) = 1;

CREATE OR REPLACE TEMP VIEW gpu_inventory_named AS
SELECT g.value AS gpu_uuid, c.value AS cluster, n.value AS node, i.gpu_index, m.value AS model,
       i.memory_total_bytes, make_timestamp(i.first_seen_ms * 1000) AS first_seen,
       make_timestamp(i.last_seen_ms * 1000) AS last_seen
FROM gpu_inventory i
JOIN ingest_strings g ON g.id = i.gpu_uuid_id
JOIN ingest_strings c ON c.id = i.cluster_id
JOIN ingest_strings n ON n.id = i.node_id
LEFT JOIN ingest_strings m ON m.id = i.model_id;

-- One rollup bucket per GPU / per slice over the samples of table `tbl` with ts_ms < cutoff,
-- in the columns of the *_minute_part tables (bucket_ms 60000: minutes, 3600000: hours).
-- Shared by the per-batch hour upsert (sql/ingest/apply_batch.sql, tbl = the batch) and the
-- minute rollups (tbl = the raw rows). Every column is a sum, max, min or the value at the
-- latest timestamp, so partial buckets merge exactly.
CREATE OR REPLACE TEMP MACRO gpu_rollup(tbl, bucket_ms, cutoff) AS TABLE
SELECT make_timestamp(ts_ms // bucket_ms * bucket_ms * 1000) AS bucket, gpu_uuid_id,
       arg_max(cluster_id, ts_ms) AS cluster_id, arg_max(node_id, ts_ms) AS node_id,
       arg_max(model_id, ts_ms) AS model_id, arg_max(memory_total_bytes, ts_ms) AS memory_total_bytes,
       sum(interval_ms) / 1000.0 AS metered_s, count(*) AS sample_count,
       sum(sm_util_ratio * interval_ms) / 1000.0 AS sm_util_s,
       sum(memory_used_bytes::DOUBLE * interval_ms) / 1000.0 AS memory_used_byte_s,
       sum(power_watts * interval_ms) / 1000.0 AS power_j,
       min(ts_ms) FILTER (WHERE energy_joules IS NOT NULL) AS first_ts_ms,
       arg_min(energy_joules, ts_ms) AS first_energy_j,
       arg_min(power_watts * interval_ms / 1000.0, ts_ms) FILTER (WHERE energy_joules IS NOT NULL) AS first_power_j,
       max(ts_ms) FILTER (WHERE energy_joules IS NOT NULL) AS last_ts_ms,
       arg_max(energy_joules, ts_ms) AS last_energy_j,
       max(ts_ms) AS latest_ts_ms, arg_max(driver_id, ts_ms) AS driver_id,
       -- health (sql/schema/050_gpu_health_hour.sql); throttled: HW_SLOWDOWN, SW_THERMAL,
       -- HW_THERMAL or HW_POWER_BRAKE among the clock-event reasons (0x8 | 0x20 | 0x40 | 0x80)
       sum(xid_events) AS xid_events, count(xid_critical_code) AS xid_critical_count,
       max(ts_ms) FILTER (WHERE xid_critical_code IS NOT NULL) AS xid_critical_ts_ms,
       arg_max(xid_critical_code, ts_ms) AS xid_critical_code,
       min(ts_ms) FILTER (WHERE ecc_uncorrected_aggregate IS NOT NULL) AS ecc_agg_first_ts_ms,
       arg_min(ecc_uncorrected_aggregate, ts_ms) AS ecc_agg_first,
       max(ts_ms) FILTER (WHERE ecc_uncorrected_aggregate IS NOT NULL) AS ecc_agg_last_ts_ms,
       arg_max(ecc_uncorrected_aggregate, ts_ms) AS ecc_agg_last, max(ecc_uncorrected_aggregate) AS ecc_agg_max,
       min(ts_ms) FILTER (WHERE ecc_uncorrected_volatile IS NOT NULL) AS ecc_vol_first_ts_ms,
       arg_min(ecc_uncorrected_volatile, ts_ms) AS ecc_vol_first,
       max(ts_ms) FILTER (WHERE ecc_uncorrected_volatile IS NOT NULL) AS ecc_vol_last_ts_ms,
       arg_max(ecc_uncorrected_volatile, ts_ms) AS ecc_vol_last, max(ecc_uncorrected_volatile) AS ecc_vol_max,
       coalesce(sum(interval_ms) FILTER (WHERE clock_event_reasons & 232 <> 0), 0) / 1000.0 AS throttled_s,
       coalesce(sum(interval_ms) FILTER (WHERE gpu_lost), 0) / 1000.0 AS lost_s,
       max(temperature_celsius) AS temperature_max_celsius,
       -- Kubernetes' device health (sql/schema/110_device_health.sql): 1 Unhealthy, 2 Unknown
       coalesce(sum(interval_ms) FILTER (WHERE device_health = 1), 0) / 1000.0 AS unhealthy_s,
       coalesce(sum(interval_ms) FILTER (WHERE device_health = 2), 0) / 1000.0 AS health_unknown_s
FROM query_table(tbl) WHERE ts_ms < cutoff GROUP BY bucket, gpu_uuid_id;

-- Per-sample shares (semantics: sql/schema/001_contract.sql), summed per slice and bucket.
-- `inventory`: a table of gpu_inventory's columns, the GPU memory sizes shares divide by.
-- A DRA slice's allocation shares are the ones its Tick sent (after the claim's split),
-- where it sent them. A sample with no usage reading at all (no HAMi or NVML memory, no
-- utilisation: a device no reader serves) counts its seconds as usage unknown.
-- The last columns come in the order sql/schema/030_usage_verified.sql and
-- 040_dra_rollups.sql appended them.
CREATE OR REPLACE TEMP MACRO slice_rollup(tbl, inventory, bucket_ms, cutoff) AS TABLE
WITH s AS (
    SELECT b.*, b.interval_ms / 1000.0 AS dt,
           capped_share(b.whole_gpu, coalesce(b.alloc_mem_share_ratio,
                                              coalesce(b.alloc_memory_bytes, b.hami_memory_limit_bytes) / i.memory_total_bytes)) AS a_mem,
           capped_share(b.whole_gpu, coalesce(b.alloc_cores_share_ratio, granted_cores(b.alloc_cores_ratio, b.sm_limit_ratio))) AS a_cores,
           trusted_memory(b.hami_memory_used_bytes, b.nvml_memory_used_bytes) AS mem_used,
           capped_share(false, trusted_memory(b.hami_memory_used_bytes, b.nvml_memory_used_bytes) / i.memory_total_bytes) AS u_mem,
           capped_share(false, b.sm_util_ratio) AS u_sm,
           memory_disagrees(b.hami_memory_used_bytes, b.nvml_memory_used_bytes) AS disagree,
           b.hami_memory_used_bytes IS NULL AND b.nvml_memory_used_bytes IS NULL AND b.sm_util_ratio IS NULL AS unknown
    FROM query_table(tbl) b LEFT JOIN query_table(inventory) i ON i.gpu_uuid_id = b.gpu_uuid_id
    WHERE b.ts_ms < cutoff
)
SELECT make_timestamp(ts_ms // bucket_ms * bucket_ms * 1000) AS bucket, gpu_uuid_id, pod_uid_id, container_id,
       arg_max(cluster_id, ts_ms) AS cluster_id, arg_max(node_id, ts_ms) AS node_id,
       arg_max(namespace_id, ts_ms) AS namespace_id, arg_max(pod_id, ts_ms) AS pod_id,
       bool_or(coalesce(whole_gpu, false)) AS whole_gpu, sum(dt) AS metered_s, count(*) AS sample_count,
       arg_max(alloc_memory_bytes, ts_ms) AS alloc_memory_bytes, arg_max(alloc_cores_ratio, ts_ms) AS alloc_cores_ratio,
       sum(a_mem * dt) AS alloc_mem_share_s, sum(a_cores * dt) AS alloc_cores_share_s,
       sum(greatest(a_mem, a_cores) * dt) AS alloc_dominant_share_s,
       sum(u_mem * dt) AS used_mem_share_s, sum(u_sm * dt) AS used_sm_share_s,
       sum(greatest(u_mem, u_sm) * dt) AS usage_share_s,
       sum(mem_used * dt) AS memory_used_byte_s, max(mem_used) AS memory_used_max_bytes,
       max(sm_util_ratio) AS sm_util_max, sum(CASE WHEN disagree THEN dt ELSE 0 END) AS hami_nvml_disagree_s,
       arg_max_null(last_kernel_age_s, ts_ms) AS last_kernel_age_s, max(ts_ms) AS latest_ts_ms,
       sum(CASE WHEN usage_verified IS FALSE THEN dt ELSE 0 END) AS usage_unverified_s,
       arg_max(claim_id, ts_ms) AS claim_id, arg_max(driver_id, ts_ms) AS driver_id,
       sum(CASE WHEN unknown THEN dt ELSE 0 END) AS usage_unknown_s
FROM s GROUP BY bucket, gpu_uuid_id, pod_uid_id, container_id;

-- Minute rollups of the raw samples with ts_ms < cutoff. Minutes are derived lazily: while
-- raw rows are retained they are aggregated on read; retention (sql/ingest/retention.sql)
-- appends the minutes of the rows it deletes to *_minute_part in the same transaction, so
-- every sample counts exactly once and minute rollups are kept for ever. A minute split
-- across retention runs or late rows merges exactly (see the rollup macros above).
CREATE OR REPLACE TEMP MACRO gpu_minute_of_raw(cutoff) AS TABLE
SELECT bucket AS minute, * EXCLUDE (bucket) FROM gpu_rollup('raw_gpu_rows', 60000, cutoff);
CREATE OR REPLACE TEMP MACRO slice_minute_of_raw(cutoff) AS TABLE
SELECT bucket AS minute, * EXCLUDE (bucket) FROM slice_rollup('raw_slice_stored', 'gpu_inventory', 60000, cutoff);

-- Partial rollups of table `tbl` merged per (bucket, GPU) / (bucket, slice): `tbl` has the
-- rollup macros' columns with the bucket named `bucket`. Read through *_partials_named
-- below, by the minute views and by the fold of the hour deltas batches left pending.
CREATE OR REPLACE TEMP MACRO gpu_partials_merged(tbl) AS TABLE
SELECT bucket, gpu_uuid_id,
       arg_max(cluster_id, latest_ts_ms) AS cluster_id, arg_max(node_id, latest_ts_ms) AS node_id,
       arg_max(model_id, latest_ts_ms) AS model_id, arg_max(memory_total_bytes, latest_ts_ms) AS memory_total_bytes,
       sum(metered_s) AS metered_s, sum(sample_count) AS sample_count, sum(sm_util_s) AS sm_util_s,
       sum(memory_used_byte_s) AS memory_used_byte_s, sum(power_j) AS power_j,
       min(first_ts_ms) AS first_ts_ms, arg_min(first_energy_j, first_ts_ms) AS first_energy_j,
       arg_min(first_power_j, first_ts_ms) AS first_power_j,
       max(last_ts_ms) AS last_ts_ms, arg_max(last_energy_j, last_ts_ms) AS last_energy_j,
       max(latest_ts_ms) AS latest_ts_ms, arg_max(driver_id, latest_ts_ms) AS driver_id,
       sum(xid_events) AS xid_events, sum(xid_critical_count) AS xid_critical_count,
       max(xid_critical_ts_ms) AS xid_critical_ts_ms, arg_max(xid_critical_code, xid_critical_ts_ms) AS xid_critical_code,
       min(ecc_agg_first_ts_ms) AS ecc_agg_first_ts_ms, arg_min(ecc_agg_first, ecc_agg_first_ts_ms) AS ecc_agg_first,
       max(ecc_agg_last_ts_ms) AS ecc_agg_last_ts_ms, arg_max(ecc_agg_last, ecc_agg_last_ts_ms) AS ecc_agg_last,
       max(ecc_agg_max) AS ecc_agg_max,
       min(ecc_vol_first_ts_ms) AS ecc_vol_first_ts_ms, arg_min(ecc_vol_first, ecc_vol_first_ts_ms) AS ecc_vol_first,
       max(ecc_vol_last_ts_ms) AS ecc_vol_last_ts_ms, arg_max(ecc_vol_last, ecc_vol_last_ts_ms) AS ecc_vol_last,
       max(ecc_vol_max) AS ecc_vol_max,
       sum(throttled_s) AS throttled_s, sum(lost_s) AS lost_s, max(temperature_max_celsius) AS temperature_max_celsius,
       sum(unhealthy_s) AS unhealthy_s, sum(health_unknown_s) AS health_unknown_s
FROM query_table(tbl) GROUP BY bucket, gpu_uuid_id;

CREATE OR REPLACE TEMP MACRO slice_partials_merged(tbl) AS TABLE
SELECT bucket, gpu_uuid_id, pod_uid_id, container_id,
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
       arg_max_null(last_kernel_age_s, latest_ts_ms) AS last_kernel_age_s, max(latest_ts_ms) AS latest_ts_ms,
       sum(usage_unverified_s) AS usage_unverified_s,
       arg_max(claim_id, latest_ts_ms) AS claim_id, arg_max(driver_id, latest_ts_ms) AS driver_id,
       sum(usage_unknown_s) AS usage_unknown_s
FROM query_table(tbl) GROUP BY bucket, gpu_uuid_id, pod_uid_id, container_id;

-- The partials to merge: the minutes retention kept plus those of the raw rows; the hour
-- deltas batches left pending (sql/schema/004_pending_rollups.sql).
CREATE OR REPLACE TEMP VIEW gpu_minute_partials AS
SELECT minute AS bucket, * EXCLUDE (minute)
FROM (SELECT * FROM gpu_minute_part UNION ALL BY NAME SELECT * FROM gpu_minute_of_raw(9223372036854775807));
CREATE OR REPLACE TEMP VIEW slice_minute_partials AS
SELECT minute AS bucket, * EXCLUDE (minute)
FROM (SELECT * FROM slice_minute_part UNION ALL BY NAME SELECT * FROM slice_minute_of_raw(9223372036854775807));
CREATE OR REPLACE TEMP VIEW gpu_hour_pending_partials AS SELECT hour AS bucket, * EXCLUDE (hour) FROM gpu_hour_pending;
CREATE OR REPLACE TEMP VIEW slice_hour_pending_partials AS SELECT hour AS bucket, * EXCLUDE (hour) FROM slice_hour_pending;

-- Partials merged, strings resolved: the minute views below and the fold of the pending
-- hour deltas into gpu_hour / slice_hour (sql/ingest/fold_rollups.sql). `strings`: the table
-- of (id, value) the ids are named from (a lake names a tenant's rows from its own catalog's
-- strings, which a tenant's scope hides: sql/lake/views.sql).
CREATE OR REPLACE TEMP MACRO gpu_partials_named(tbl, strings := 'ingest_strings') AS TABLE
SELECT d.bucket, g.value AS gpu_uuid, c.value AS cluster, n.value AS node, m.value AS model,
       d.* EXCLUDE (bucket, gpu_uuid_id, cluster_id, node_id, model_id, driver_id), dr.value AS driver
FROM gpu_partials_merged(tbl) d
JOIN query_table(strings) g ON g.id = d.gpu_uuid_id
JOIN query_table(strings) c ON c.id = d.cluster_id
JOIN query_table(strings) n ON n.id = d.node_id
LEFT JOIN query_table(strings) m ON m.id = d.model_id
LEFT JOIN query_table(strings) dr ON dr.id = d.driver_id;

CREATE OR REPLACE TEMP MACRO slice_partials_named(tbl, strings := 'ingest_strings') AS TABLE
SELECT d.bucket, c.value AS cluster, n.value AS node, g.value AS gpu_uuid, ns.value AS namespace,
       p.value AS pod, u.value AS pod_uid, k.value AS container, d.* EXCLUDE (bucket, gpu_uuid_id, pod_uid_id,
       container_id, cluster_id, node_id, namespace_id, pod_id, claim_id, driver_id),
       cl.value AS claim, dr.value AS driver
FROM slice_partials_merged(tbl) d
JOIN query_table(strings) g ON g.id = d.gpu_uuid_id
JOIN query_table(strings) u ON u.id = d.pod_uid_id
JOIN query_table(strings) k ON k.id = d.container_id
JOIN query_table(strings) c ON c.id = d.cluster_id
JOIN query_table(strings) n ON n.id = d.node_id
LEFT JOIN query_table(strings) ns ON ns.id = d.namespace_id
LEFT JOIN query_table(strings) p ON p.id = d.pod_id
LEFT JOIN query_table(strings) cl ON cl.id = d.claim_id
LEFT JOIN query_table(strings) dr ON dr.id = d.driver_id;

-- Minute rollups.
CREATE OR REPLACE TEMP VIEW gpu_minute AS
SELECT bucket AS minute, gpu_uuid, cluster, node, model, memory_total_bytes, metered_s, sample_count, sm_util_s,
       memory_used_byte_s, hour_energy(first_energy_j, last_energy_j, first_power_j, power_j) AS energy_joules,
       latest_ts_ms, driver
FROM gpu_partials_named('gpu_minute_partials');

CREATE OR REPLACE TEMP VIEW slice_minute AS
SELECT bucket AS minute, * EXCLUDE (bucket) FROM slice_partials_named('slice_minute_partials');

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
