-- gpu_hour recomputed from scratch out of the retained raw samples (see slice_hour_from_raw.sql).
SELECT date_trunc('hour', make_timestamp(ts_ms * 1000)) AS hour, arg_max(cluster, ts_ms) AS cluster,
       arg_max(node, ts_ms) AS node, gpu_uuid, arg_max(model, ts_ms) AS model,
       arg_max(memory_total_bytes, ts_ms) AS memory_total_bytes,
       least(3600, sum(interval_ms) / 1000.0) AS metered_s, count(*) AS sample_count,
       sum(sm_util_ratio * interval_ms) / 1000.0 AS sm_util_s,
       sum(memory_used_bytes::DOUBLE * interval_ms) / 1000.0 AS memory_used_byte_s,
       hour_energy(arg_min(energy_joules, ts_ms), arg_max(energy_joules, ts_ms),
                   arg_min(power_watts * interval_ms / 1000.0, ts_ms) FILTER (WHERE energy_joules IS NOT NULL),
                   sum(power_watts * interval_ms) / 1000.0) AS energy_joules, arg_max(driver, ts_ms) AS driver
FROM raw_gpu GROUP BY ALL;
