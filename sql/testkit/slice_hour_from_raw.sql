-- slice_hour recomputed from scratch out of the raw samples still retained, all but the
-- shares: the reference the incremental rollup must equal (tests), and the way to rebuild
-- hours within retention. The shares are checked against testkit/share_oracle.py, which
-- works them out in Python from the same samples, so a wrong share formula cannot hide here.
SELECT date_trunc('hour', make_timestamp(ts_ms * 1000)) AS hour, arg_max(cluster, ts_ms) AS cluster,
       arg_max(node, ts_ms) AS node, gpu_uuid, arg_max(namespace, ts_ms) AS namespace, arg_max(pod, ts_ms) AS pod,
       pod_uid, container, bool_or(coalesce(whole_gpu, false)) AS whole_gpu,
       least(3600, sum(interval_ms / 1000.0)) AS metered_s, count(*) AS sample_count,
       arg_max(alloc_memory_bytes, ts_ms) AS alloc_memory_bytes, arg_max(alloc_cores_ratio, ts_ms) AS alloc_cores_ratio,
       max(sm_util_ratio) AS sm_util_max, arg_max_null(last_kernel_age_s, ts_ms) AS last_kernel_age_s,
       max(ts_ms) AS latest_ts_ms, arg_max(claim, ts_ms) AS claim, arg_max(driver, ts_ms) AS driver
FROM raw_slice GROUP BY 1, gpu_uuid, pod_uid, container;
