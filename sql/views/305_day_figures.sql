-- Day figures from the hour rollups of [d_start, d_end) (whole days): per GPU-day, per
-- slice-day and per cluster-hour, the columns of reader_gpu_day, reader_slice_day and
-- reader_cluster_hour, and the money kept per hour summed per slice-day
-- (reader_kept_slice_day; sql/schema/090_reader_days.sql). A readers' file keeps them for every
-- day it holds (store/reader_file.py runs these macros on the store's hours); other readers
-- compute them when they read (sql/views/310_days.sql). Every figure is a sum, count, max,
-- bit-or or latest value, so a month's is the same aggregate over its days.

-- Per GPU-hour, its slices: as dash_gpu_hour's, and the slices' metered milliseconds
-- (the dividend's "each slice on a whole GPU").
CREATE OR REPLACE TEMP MACRO slices_per_gpu_hour(d_start, d_end) AS TABLE
SELECT hour, gpu_uuid, count(*) AS slices, sum(alloc_dominant_share_s) AS alloc_s, sum(usage_share_s) AS usage_s,
       sum(round(metered_s * 1000)::BIGINT) AS whole_gpu_ms
FROM slice_hour WHERE hour >= d_start AND hour < d_end
GROUP BY hour, gpu_uuid;

-- GPU-hours with their slices' figures, allocation and usage capped at the metered seconds.
CREATE OR REPLACE TEMP MACRO gpu_hours_with_slices(d_start, d_end) AS TABLE
SELECT g.hour, g.cluster, g.node, g.gpu_uuid, g.model, g.driver, g.metered_s,
       coalesce(g.sm_util_s, 0) AS sm_util_s, g.sm_util_s IS NOT NULL AS nvml_read,
       g.energy_joules, coalesce(s.slices, 0) AS slices,
       least(coalesce(s.alloc_s, 0), g.metered_s) AS alloc_s, least(coalesce(s.usage_s, 0), g.metered_s) AS usage_s,
       round(g.metered_s * 1000)::BIGINT AS metered_ms, coalesce(s.whole_gpu_ms, 0) AS whole_gpu_ms,
       g.ecc_agg_last, g.ecc_agg_last_ts_ms, g.ecc_vol_last, g.ecc_vol_last_ts_ms
FROM gpu_hour g
LEFT JOIN slices_per_gpu_hour(d_start, d_end) s ON s.hour = g.hour AND s.gpu_uuid = g.gpu_uuid
WHERE g.hour >= d_start AND g.hour < d_end;

CREATE OR REPLACE TEMP MACRO gpu_days_of_hours(d_start, d_end) AS TABLE
SELECT date_trunc('day', hour) AS day, cluster, node, gpu_uuid, model, driver,
       count(*) AS hours, bit_or(1::INTEGER << hour(hour)::INTEGER) AS hour_mask,
       sum(metered_s) AS metered_s, sum(sm_util_s) AS sm_util_s, bool_or(nvml_read) AS nvml_read,
       sum(energy_joules) AS energy_joules, sum(slices) AS slices, max(slices) AS max_slices,
       count(*) FILTER (WHERE slices > 1) AS shared_hours, sum(alloc_s) AS alloc_s, sum(usage_s) AS usage_s,
       sum(metered_ms)::HUGEINT AS metered_ms,
       sum(CASE WHEN slices > 0 THEN metered_ms ELSE 0 END)::HUGEINT AS in_use_ms,
       sum(whole_gpu_ms)::HUGEINT AS whole_gpu_ms,
       min(energy_joules / metered_s) FILTER (WHERE metered_s >= 600 AND energy_joules > 0) AS idle_watts,
       arg_max(ecc_agg_last, ecc_agg_last_ts_ms) AS ecc_agg_last, max(ecc_agg_last_ts_ms) AS ecc_agg_last_ts_ms,
       arg_max(ecc_vol_last, ecc_vol_last_ts_ms) AS ecc_vol_last, max(ecc_vol_last_ts_ms) AS ecc_vol_last_ts_ms
FROM gpu_hours_with_slices(d_start, d_end)
GROUP BY ALL;

CREATE OR REPLACE TEMP MACRO cluster_hours_of_hours(d_start, d_end) AS TABLE
SELECT hour, cluster, count(*) AS gpus, sum(slices) AS slices, sum(metered_s) AS metered_s,
       sum(sm_util_s) AS sm_util_s, sum(alloc_s) AS alloc_s,
       sum(greatest(alloc_s - sm_util_s, 0)) AS reserved_idle_s,
       sum(greatest(metered_s - greatest(alloc_s, sm_util_s), 0)) AS unallocated_s
FROM gpu_hours_with_slices(d_start, d_end)
GROUP BY ALL;

-- Per slice-day; gpu_cluster and model are its GPU row's in those hours.
CREATE OR REPLACE TEMP MACRO slice_days_of_hours(d_start, d_end) AS TABLE
WITH s AS (
    SELECT s.*, g.cluster AS gpu_cluster, g.model
    FROM slice_hour s
    LEFT JOIN (SELECT hour, gpu_uuid, cluster, model FROM gpu_hour WHERE hour >= d_start AND hour < d_end) g
           ON g.hour = s.hour AND g.gpu_uuid = s.gpu_uuid
    WHERE s.hour >= d_start AND s.hour < d_end
)
SELECT date_trunc('day', hour) AS day, gpu_uuid, cluster, node, namespace, pod, pod_uid, container, gpu_cluster, model,
       count(*) AS hours, min(hour) AS first_hour, max(hour) AS last_hour, max(latest_ts_ms) AS latest_ts_ms,
       sum(metered_s) AS metered_s, sum(alloc_dominant_share_s) AS alloc_s, sum(usage_share_s) AS usage_s,
       sum(coalesce(usage_unverified_s, 0)) AS unverified_s,
       sum(greatest(alloc_dominant_share_s - usage_share_s, 0)) AS unused_s,
       sum(CASE WHEN used_sm_share_s = 0 THEN metered_s ELSE 0 END) AS idle_s,
       sum(round(alloc_dominant_share_s * 1000)::BIGINT)::BIGINT AS alloc_ms,
       arg_max(driver, hour) AS driver, max(hour) FILTER (WHERE driver IS NOT NULL) AS driver_hour,
       arg_max(claim, hour) AS claim, max(hour) FILTER (WHERE claim IS NOT NULL) AS claim_hour,
       arg_max(last_kernel_age_s, hour) AS kernel_age_s,
       max(hour) FILTER (WHERE last_kernel_age_s IS NOT NULL) AS kernel_hour,
       arg_max(alloc_dominant_share_s / nullif(metered_s, 0), hour) AS allocation,
       max(hour) FILTER (WHERE alloc_dominant_share_s / nullif(metered_s, 0) IS NOT NULL) AS allocation_hour
FROM s
GROUP BY ALL;

-- Right-sizing's figures of each slice over its metered hours (reader_slice_sizing_day,
-- sql/schema/092_reader_slice_sizing.sql), per day (by_day) or over the whole window in one
-- part (day = d_start): sql/rightsizing/slices.sql merges any such partition of the hours.
CREATE OR REPLACE TEMP MACRO slice_sizing_of_hours(d_start, d_end, by_day) AS TABLE
WITH s AS (
    SELECT *, coalesce(memory_used_max_bytes::DOUBLE, memory_used_byte_s / metered_s) AS mem,
           used_sm_share_s / metered_s AS sm
    FROM slice_hour WHERE hour >= d_start AND hour < d_end AND metered_s > 0
)
SELECT CASE WHEN by_day THEN date_trunc('day', hour) ELSE d_start::TIMESTAMP END AS day,
       gpu_uuid, pod_uid, container, any_value(cluster) AS cluster, any_value(node) AS node,
       any_value(namespace) AS namespace, any_value(pod) AS pod,
       count(*) AS hours, min(hour) AS first_hour, max(hour) AS last_hour, sum(metered_s) AS metered_s,
       sum(usage_share_s) AS usage_share_s, sum(alloc_dominant_share_s) AS alloc_dominant_share_s,
       bool_or(whole_gpu) AS whole_gpu,
       arg_max(alloc_memory_bytes, hour) AS alloc_memory_bytes,
       max(hour) FILTER (WHERE alloc_memory_bytes IS NOT NULL) AS alloc_memory_hour,
       arg_max(alloc_cores_ratio, hour) AS alloc_cores_ratio,
       max(hour) FILTER (WHERE alloc_cores_ratio IS NOT NULL) AS alloc_cores_hour,
       arg_max(alloc_mem_share_s / metered_s, hour) AS alloc_mem_share,
       max(hour) FILTER (WHERE alloc_mem_share_s IS NOT NULL) AS alloc_mem_share_hour,
       arg_max(alloc_cores_share_s / metered_s, hour) AS alloc_cores_share,
       max(hour) FILTER (WHERE alloc_cores_share_s IS NOT NULL) AS alloc_cores_share_hour,
       arg_max_null(last_kernel_age_s, hour) AS last_kernel_age_s,
       max(mem) AS mem_max, max(coalesce(sm_util_max::DOUBLE, sm)) AS sm_max,
       list(mem) AS mem_values, list(sm) AS sm_values
FROM s
GROUP BY ALL;

CREATE OR REPLACE TEMP MACRO slice_sizing_days_of_hours(d_start, d_end) AS TABLE
SELECT * FROM slice_sizing_of_hours(d_start, d_end, true);

-- The money kept per slice-hour summed per day (sql/views/101_kept_money.sql kept_slice_sums),
-- with the notes of its slice-hours (the expressions of sql/chargeback/slice_line_notes.sql).
CREATE OR REPLACE TEMP MACRO kept_slice_days_of_hours(d_start, d_end) AS TABLE
WITH k AS (
    SELECT k.*, s.usage_unverified_s, s.usage_unknown_s, s.claim, s.driver,
           s.usage_unverified_s > 0 OR s.usage_unknown_s > 0 OR s.claim IS NOT NULL OR s.driver IS NOT NULL AS noted
    FROM kept_slice_hour k
    LEFT JOIN slice_hour s ON s.hour = k.hour AND s.gpu_uuid = k.gpu_uuid AND s.pod_uid = k.pod_uid
                          AND s.container = k.container AND s.hour >= d_start AND s.hour < d_end
    WHERE k.hour >= d_start AND k.hour < d_end
)
SELECT date_trunc('day', hour) AS day, CASE WHEN p_model IS NULL THEN hour END AS model_hour,
       gpu_uuid, p_cluster, p_node, p_model, cluster, namespace, pod, pod_uid, container,
       sum(a_dom)::HUGEINT AS a_dom, sum(a_mem)::HUGEINT AS a_mem, sum(a_cores)::HUGEINT AS a_cores,
       sum(u)::HUGEINT AS u, sum(m_dom)::HUGEINT AS m_dom, sum(m_mem)::HUGEINT AS m_mem,
       sum(m_cores)::HUGEINT AS m_cores, sum(e_dom)::HUGEINT AS e_dom, sum(e_mem)::HUGEINT AS e_mem,
       sum(e_cores)::HUGEINT AS e_cores, sum(greatest(a_dom - u, 0))::HUGEINT AS w_dom,
       sum(greatest(a_mem - u, 0))::HUGEINT AS w_mem, sum(greatest(a_cores - u, 0))::HUGEINT AS w_cores,
       count(*)::BIGINT AS n,
       sum(round(least(usage_unverified_s, 3600.0) * 1e6)::BIGINT) FILTER (WHERE noted)::BIGINT AS unverified_u,
       sum(round(least(usage_unknown_s, 3600.0) * 1e6)::BIGINT) FILTER (WHERE noted)::BIGINT AS unknown_u,
       arg_max(claim, hour) AS claim, max(hour) FILTER (WHERE claim IS NOT NULL) AS claim_hour,
       arg_max(driver, hour) AS driver, max(hour) FILTER (WHERE driver IS NOT NULL) AS driver_hour
FROM k
GROUP BY ALL;

-- The kept GPU-hours summed per day and placement (reader_kept_gpu_day), with the bill's
-- integer steps (sql/views/100_chargeback.sql).
CREATE OR REPLACE TEMP MACRO kept_gpu_days_of_hours(d_start, d_end) AS TABLE
WITH k AS (
    SELECT k.*, cb_cap_u(k.metered_s) AS cap, g.driver AS gpu_driver
    FROM kept_gpu_hour k
    LEFT JOIN gpu_hour g ON g.hour = k.hour AND g.gpu_uuid = k.gpu_uuid AND g.hour >= d_start AND g.hour < d_end
    WHERE k.hour >= d_start AND k.hour < d_end
)
SELECT date_trunc('day', hour) AS day, cluster, node, gpu_uuid, model,
       count(*) AS hours, min(hour) AS first_hour, max(hour) AS last_hour,
       sum(cap)::HUGEINT AS cap_u, sum(cb_energy_mj(energy_joules))::HUGEINT AS energy_mj,
       sum(CASE WHEN a_dom_tot > cap THEN sc_a_dom ELSE a_dom_tot END)::HUGEINT AS b_alloc_dom,
       sum(CASE WHEN a_mem_tot > cap THEN sc_a_mem ELSE a_mem_tot END)::HUGEINT AS b_alloc_mem,
       sum(CASE WHEN a_cores_tot > cap THEN sc_a_cores ELSE a_cores_tot END)::HUGEINT AS b_alloc_cores,
       sum(CASE WHEN u_tot > cap THEN sc_u ELSE u_tot END)::HUGEINT AS b_usage,
       sum(CASE WHEN m_dom_tot > cap THEN sc_m_dom ELSE m_dom_tot END)::HUGEINT AS b_max_dom,
       sum(CASE WHEN m_mem_tot > cap THEN sc_m_mem ELSE m_mem_tot END)::HUGEINT AS b_max_mem,
       sum(CASE WHEN m_cores_tot > cap THEN sc_m_cores ELSE m_cores_tot END)::HUGEINT AS b_max_cores,
       arg_max(gpu_driver, hour) AS driver, max(hour) FILTER (WHERE gpu_driver IS NOT NULL) AS driver_hour
FROM k
GROUP BY ALL;
