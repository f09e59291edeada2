-- slice_hour recomputed from scratch out of the raw samples still retained: the reference
-- the incremental rollup must equal (tests), and the way to rebuild hours within retention.
WITH s AS (
    SELECT r.*, r.interval_ms / 1000.0 AS dt, date_trunc('hour', make_timestamp(r.ts_ms * 1000)) AS hour,
           capped_share(r.whole_gpu, coalesce(r.alloc_memory_bytes, r.hami_memory_limit_bytes) / i.memory_total_bytes) AS a_mem,
           capped_share(r.whole_gpu, granted_cores(r.alloc_cores_ratio, r.sm_limit_ratio)) AS a_cores,
           trusted_memory(r.hami_memory_used_bytes, r.nvml_memory_used_bytes) AS mem_used,
           capped_share(false, trusted_memory(r.hami_memory_used_bytes, r.nvml_memory_used_bytes) / i.memory_total_bytes) AS u_mem,
           capped_share(false, r.sm_util_ratio) AS u_sm,
           memory_disagrees(r.hami_memory_used_bytes, r.nvml_memory_used_bytes) AS disagree
    FROM raw_slice r LEFT JOIN gpu_inventory_named i ON i.gpu_uuid = r.gpu_uuid
)
SELECT hour, arg_max(cluster, ts_ms) AS cluster, arg_max(node, ts_ms) AS node, gpu_uuid,
       arg_max(namespace, ts_ms) AS namespace, arg_max(pod, ts_ms) AS pod, pod_uid, container,
       bool_or(coalesce(whole_gpu, false)) AS whole_gpu, least(3600, sum(dt)) AS metered_s, count(*) AS sample_count,
       arg_max(alloc_memory_bytes, ts_ms) AS alloc_memory_bytes, arg_max(alloc_cores_ratio, ts_ms) AS alloc_cores_ratio,
       sum(a_mem * dt) AS alloc_mem_share_s, sum(a_cores * dt) AS alloc_cores_share_s,
       sum(greatest(a_mem, a_cores) * dt) AS alloc_dominant_share_s,
       sum(u_mem * dt) AS used_mem_share_s, sum(u_sm * dt) AS used_sm_share_s, sum(greatest(u_mem, u_sm) * dt) AS usage_share_s,
       sum(mem_used * dt) AS memory_used_byte_s, max(mem_used) AS memory_used_max_bytes, max(sm_util_ratio) AS sm_util_max,
       sum(CASE WHEN disagree THEN dt ELSE 0 END) AS hami_nvml_disagree_s,
       arg_max_null(last_kernel_age_s, ts_ms) AS last_kernel_age_s, max(ts_ms) AS latest_ts_ms
FROM s GROUP BY hour, gpu_uuid, pod_uid, container;
