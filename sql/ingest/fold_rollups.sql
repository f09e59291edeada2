-- Fold the rollup deltas that batches appended to the *_pending tables
-- (sql/schema/004_pending_rollups.sql) into gpu_inventory, gpu_hour and slice_hour, then
-- empty them; one transaction (ingest/writer.py: inside a batch's, or on its own).
-- Merging the partials first is exact: every column is a sum, a max, a min or the value at
-- the latest timestamp (gpu_partials_named / slice_partials_named, the merge the minute
-- views use: sql/views/011_ingest.sql); the merged row then meets the stored one as a
-- single batch's delta would.

INSERT OR REPLACE INTO gpu_inventory BY NAME
SELECT * FROM gpu_inventory_latest WHERE gpu_uuid_id IN (SELECT gpu_uuid_id FROM gpu_inventory_pending);

INSERT INTO gpu_hour (hour, cluster, node, gpu_uuid, model, memory_total_bytes, metered_s, sample_count,
                      sm_util_s, memory_used_byte_s, energy_joules, power_j, first_ts_ms, first_energy_j,
                      first_power_j, last_ts_ms, last_energy_j, latest_ts_ms, driver, xid_events, xid_critical_count,
                      xid_critical_ts_ms, xid_critical_code, ecc_agg_first_ts_ms, ecc_agg_first, ecc_agg_last_ts_ms,
                      ecc_agg_last, ecc_agg_max, ecc_vol_first_ts_ms, ecc_vol_first, ecc_vol_last_ts_ms,
                      ecc_vol_last, ecc_vol_max, throttled_s, lost_s, temperature_max_celsius, unhealthy_s,
                      health_unknown_s)
SELECT bucket, cluster, node, gpu_uuid, model, memory_total_bytes, least(3600, metered_s), sample_count,
       sm_util_s, memory_used_byte_s, NULL, power_j, first_ts_ms, first_energy_j,
       first_power_j, last_ts_ms, last_energy_j, latest_ts_ms, driver, xid_events, xid_critical_count,
       xid_critical_ts_ms, xid_critical_code, ecc_agg_first_ts_ms, ecc_agg_first, ecc_agg_last_ts_ms,
       ecc_agg_last, ecc_agg_max, ecc_vol_first_ts_ms, ecc_vol_first, ecc_vol_last_ts_ms,
       ecc_vol_last, ecc_vol_max, throttled_s, lost_s, temperature_max_celsius, unhealthy_s, health_unknown_s
FROM gpu_partials_named('gpu_hour_pending_partials')
ON CONFLICT (hour, gpu_uuid) DO UPDATE SET
    cluster = CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.cluster ELSE gpu_hour.cluster END,
    node = CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.node ELSE gpu_hour.node END,
    model = coalesce(CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.model END, gpu_hour.model, excluded.model),
    memory_total_bytes = coalesce(CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.memory_total_bytes END,
                                  gpu_hour.memory_total_bytes, excluded.memory_total_bytes),
    driver = coalesce(CASE WHEN excluded.latest_ts_ms >= gpu_hour.latest_ts_ms THEN excluded.driver END,
                      gpu_hour.driver, excluded.driver),
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
    latest_ts_ms = greatest(gpu_hour.latest_ts_ms, excluded.latest_ts_ms),
    -- health (sql/schema/050_gpu_health_hour.sql): sums, maxima, values at the earliest / latest reading
    xid_events = coalesce(gpu_hour.xid_events + excluded.xid_events, gpu_hour.xid_events, excluded.xid_events),
    xid_critical_count = coalesce(gpu_hour.xid_critical_count, 0) + coalesce(excluded.xid_critical_count, 0),
    xid_critical_code = CASE WHEN excluded.xid_critical_ts_ms >= coalesce(gpu_hour.xid_critical_ts_ms, excluded.xid_critical_ts_ms)
                             THEN excluded.xid_critical_code ELSE gpu_hour.xid_critical_code END,
    xid_critical_ts_ms = greatest(gpu_hour.xid_critical_ts_ms, excluded.xid_critical_ts_ms),
    ecc_agg_first = CASE WHEN excluded.ecc_agg_first_ts_ms <= coalesce(gpu_hour.ecc_agg_first_ts_ms, excluded.ecc_agg_first_ts_ms)
                         THEN excluded.ecc_agg_first ELSE gpu_hour.ecc_agg_first END,
    ecc_agg_first_ts_ms = least(gpu_hour.ecc_agg_first_ts_ms, excluded.ecc_agg_first_ts_ms),
    ecc_agg_last = CASE WHEN excluded.ecc_agg_last_ts_ms >= coalesce(gpu_hour.ecc_agg_last_ts_ms, excluded.ecc_agg_last_ts_ms)
                        THEN excluded.ecc_agg_last ELSE gpu_hour.ecc_agg_last END,
    ecc_agg_last_ts_ms = greatest(gpu_hour.ecc_agg_last_ts_ms, excluded.ecc_agg_last_ts_ms),
    ecc_agg_max = greatest(gpu_hour.ecc_agg_max, excluded.ecc_agg_max),
    ecc_vol_first = CASE WHEN excluded.ecc_vol_first_ts_ms <= coalesce(gpu_hour.ecc_vol_first_ts_ms, excluded.ecc_vol_first_ts_ms)
                         THEN excluded.ecc_vol_first ELSE gpu_hour.ecc_vol_first END,
    ecc_vol_first_ts_ms = least(gpu_hour.ecc_vol_first_ts_ms, excluded.ecc_vol_first_ts_ms),
    ecc_vol_last = CASE WHEN excluded.ecc_vol_last_ts_ms >= coalesce(gpu_hour.ecc_vol_last_ts_ms, excluded.ecc_vol_last_ts_ms)
                        THEN excluded.ecc_vol_last ELSE gpu_hour.ecc_vol_last END,
    ecc_vol_last_ts_ms = greatest(gpu_hour.ecc_vol_last_ts_ms, excluded.ecc_vol_last_ts_ms),
    ecc_vol_max = greatest(gpu_hour.ecc_vol_max, excluded.ecc_vol_max),
    throttled_s = coalesce(gpu_hour.throttled_s, 0) + coalesce(excluded.throttled_s, 0),
    lost_s = coalesce(gpu_hour.lost_s, 0) + coalesce(excluded.lost_s, 0),
    unhealthy_s = coalesce(gpu_hour.unhealthy_s, 0) + coalesce(excluded.unhealthy_s, 0),
    health_unknown_s = coalesce(gpu_hour.health_unknown_s, 0) + coalesce(excluded.health_unknown_s, 0),
    temperature_max_celsius = greatest(gpu_hour.temperature_max_celsius, excluded.temperature_max_celsius);

UPDATE gpu_hour SET energy_joules = hour_energy(first_energy_j, last_energy_j, first_power_j, power_j)
FROM (SELECT d.hour AS h, s.value AS g
      FROM (SELECT DISTINCT hour, gpu_uuid_id FROM gpu_hour_pending) d
      JOIN ingest_strings s ON s.id = d.gpu_uuid_id) d
WHERE gpu_hour.hour = d.h AND gpu_hour.gpu_uuid = d.g;

INSERT INTO slice_hour BY NAME
SELECT bucket AS hour, * EXCLUDE (bucket) REPLACE (least(3600, metered_s) AS metered_s)
FROM slice_partials_named('slice_hour_pending_partials')
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
    latest_ts_ms = greatest(slice_hour.latest_ts_ms, excluded.latest_ts_ms),
    usage_unverified_s = coalesce(slice_hour.usage_unverified_s, 0) + coalesce(excluded.usage_unverified_s, 0),
    -- the claim and driver of the latest sample that named them
    claim = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN coalesce(excluded.claim, slice_hour.claim)
                 ELSE coalesce(slice_hour.claim, excluded.claim) END,
    driver = CASE WHEN excluded.latest_ts_ms >= slice_hour.latest_ts_ms THEN coalesce(excluded.driver, slice_hour.driver)
                  ELSE coalesce(slice_hour.driver, excluded.driver) END,
    usage_unknown_s = coalesce(slice_hour.usage_unknown_s, 0) + coalesce(excluded.usage_unknown_s, 0);

-- the GPU-hours this fold changed, whose money is kept again next (sql/ingest/keep_money.sql)
INSERT INTO kept_touched_t
SELECT DISTINCT d.hour, s.value
FROM (SELECT hour, gpu_uuid_id FROM gpu_hour_pending UNION SELECT hour, gpu_uuid_id FROM slice_hour_pending) d
JOIN ingest_strings s ON s.id = d.gpu_uuid_id;

DELETE FROM gpu_inventory_pending;
DELETE FROM gpu_hour_pending;
DELETE FROM slice_hour_pending;
