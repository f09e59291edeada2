-- Freeze month [$m_start, $m_end) as billed by invoice month $as_of (chargeback/close.py):
-- copy its rollups, with the tenant attribution of this moment, into the frozen tables.
INSERT INTO frozen_gpu_hour BY NAME
SELECT $as_of::DATE AS as_of, $m_start::DATE AS data_month, hour, cluster, node, gpu_uuid, model, metered_s, energy_joules
FROM gpu_hour
WHERE hour >= $m_start::TIMESTAMP AND hour < $m_end::TIMESTAMP;

INSERT INTO frozen_slice_hour BY NAME
SELECT $as_of::DATE AS as_of, $m_start::DATE AS data_month, tenant, hour, cluster, node, gpu_uuid, namespace, pod, pod_uid,
       container, whole_gpu, metered_s, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
       usage_share_s, hami_nvml_disagree_s
FROM slice_hour_tenant
WHERE hour >= $m_start::TIMESTAMP AND hour < $m_end::TIMESTAMP;

INSERT INTO frozen_slice_unverified BY NAME
SELECT $as_of::DATE AS as_of, hour, gpu_uuid, pod_uid, container, usage_unverified_s
FROM slice_hour
WHERE hour >= $m_start::TIMESTAMP AND hour < $m_end::TIMESTAMP AND usage_unverified_s > 0;

INSERT INTO frozen_slice_dra BY NAME
SELECT $as_of::DATE AS as_of, hour, gpu_uuid, pod_uid, container, claim, driver, coalesce(usage_unknown_s, 0) AS usage_unknown_s
FROM slice_hour
WHERE hour >= $m_start::TIMESTAMP AND hour < $m_end::TIMESTAMP
  AND (claim IS NOT NULL OR driver IS NOT NULL OR usage_unknown_s > 0);

INSERT INTO frozen_gpu_driver BY NAME
SELECT $as_of::DATE AS as_of, hour, gpu_uuid, driver
FROM gpu_hour
WHERE hour >= $m_start::TIMESTAMP AND hour < $m_end::TIMESTAMP AND driver IS NOT NULL;

INSERT INTO frozen_gpu_health BY NAME
SELECT $as_of::DATE AS as_of, hour, gpu_uuid, xid_critical_count, ecc_uncorrected_increase, throttled_s, lost_s,
       unhealthy_s
FROM gpu_health($m_start::TIMESTAMP, $m_end::TIMESTAMP)
WHERE xid_critical_count > 0 OR ecc_uncorrected_increase > 0 OR throttled_s > 0 OR lost_s > 0 OR unhealthy_s > 0;

-- the month's hours changed in the frozen tables, for the readers' file (sql/schema/080_reader_changes.sql)
INSERT INTO reader_changes (hour)
SELECT h FROM generate_series($m_start::TIMESTAMP, $m_end::TIMESTAMP - INTERVAL 1 HOUR, INTERVAL 1 HOUR) t(h)
WHERE h NOT IN (SELECT hour FROM reader_changes WHERE refresh IS NULL AND hour IS NOT NULL);
