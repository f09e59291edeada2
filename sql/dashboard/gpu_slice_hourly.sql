-- Hourly allocated and used share of each slice on one GPU.
SELECT
    hour, coalesce(namespace, '(none)') || '/' || coalesce(pod, pod_uid) || '/' || container AS slice,
    alloc_dominant_share_s / nullif(metered_s, 0)  AS allocation,
    usage_share_s / nullif(metered_s, 0)           AS usage
FROM slice_hour
WHERE gpu_uuid = $gpu AND hour >= $start AND hour < $end
ORDER BY hour, slice;
