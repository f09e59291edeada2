-- The recurring need, per GPU, of the slices that ended before the window's end (batch
-- jobs, finished notebooks): those never ran all at once, so the plan must not add them up
-- as if they did. For each GPU and metered hour, the need of such slices present in that
-- hour is summed (memory peak as a fraction of the GPU, SM mean share; a whole-GPU pod
-- counts 1 in both); the result is its nearest-rank p95 over all the GPU's metered hours,
-- hours without such slices counting as 0: rank k = ceil(0.95 n) of n hours of which
-- n - m are zeros, i.e. the (k - (n - m))-th smallest of the m busy hours, else 0.
-- The caller registers two relations: recommend_ephemeral_keys (gpu_uuid, pod_uid,
-- container) and recommend_gpu_info (gpu_uuid, memory_total_bytes, hours).
WITH h AS (
    SELECT s.gpu_uuid, s.hour,
           sum(CASE WHEN s.whole_gpu THEN 0 ELSE coalesce(s.memory_used_max_bytes::DOUBLE,
                                                          s.memory_used_byte_s / s.metered_s) END) AS mem_bytes,
           sum(CASE WHEN s.whole_gpu THEN 0 ELSE s.used_sm_share_s / s.metered_s END) AS sm_share,
           count(*) FILTER (WHERE s.whole_gpu) AS whole_n
    FROM slice_hour s
    SEMI JOIN recommend_ephemeral_keys k
           ON s.gpu_uuid = k.gpu_uuid AND s.pod_uid = k.pod_uid AND s.container = k.container
    WHERE s.hour >= $start AND s.hour < $end AND s.metered_s > 0
    GROUP BY s.gpu_uuid, s.hour
),
per_gpu AS (
    SELECT h.gpu_uuid,
           list(coalesce(h.mem_bytes / i.memory_total_bytes, 1.0) + h.whole_n) AS mem,
           list(h.sm_share + h.whole_n) AS sm,
           count(*) AS m,
           greatest(coalesce(any_value(i.hours), 0), count(*)) AS n
    FROM h LEFT JOIN recommend_gpu_info i ON i.gpu_uuid = h.gpu_uuid
    GROUP BY h.gpu_uuid
)
SELECT gpu_uuid,
       CASE WHEN k > 0 THEN list_sort(mem)[k] ELSE 0 END AS mem_p95,
       CASE WHEN k > 0 THEN list_sort(sm)[k] ELSE 0 END AS sm_p95
FROM (SELECT *, (ceil(0.95 * n - 1e-9) - (n - m))::BIGINT AS k FROM per_gpu)
ORDER BY gpu_uuid
