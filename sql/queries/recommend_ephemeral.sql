-- Hourly need, per GPU, of the slices that ended before the window's end (batch jobs,
-- finished notebooks): those never run all at once, so the plan must not add them up as
-- if they did. For each GPU and metered hour: the summed memory peak (bytes) and SM mean
-- share of such slices present in that hour, and how many of them were whole-GPU pods.
-- recommend_ephemeral_keys is a relation the caller registers: (gpu_uuid, pod_uid, container).
SELECT s.gpu_uuid, s.hour,
       sum(CASE WHEN s.whole_gpu THEN 0
                ELSE coalesce(s.memory_used_max_bytes::DOUBLE, s.memory_used_byte_s / s.metered_s) END) AS mem_bytes,
       sum(CASE WHEN s.whole_gpu THEN 0 ELSE s.used_sm_share_s / s.metered_s END) AS sm_share,
       count(*) FILTER (WHERE s.whole_gpu) AS whole_n
FROM slice_hour s
SEMI JOIN recommend_ephemeral_keys k
       ON s.gpu_uuid = k.gpu_uuid AND s.pod_uid = k.pod_uid AND s.container = k.container
WHERE s.hour >= $start AND s.hour < $end AND s.metered_s > 0
GROUP BY s.gpu_uuid, s.hour
