-- The month's GPU health events (sql/views/012_health.sql: an hour with an Xid, an
-- uncorrectable ECC error, throttling or the GPU lost) beside the tenants whose slices were
-- on the GPU in that hour, the newest first; only the GPUs in $gpus (the page's filtered list).
SELECT e.hour, e.gpu_uuid, e.node, e.what, e.degraded,
       coalesce(string_agg(DISTINCT s.tenant, ', ' ORDER BY s.tenant), '') AS tenants
FROM gpu_health_events($start, $end, $throttled_share) e
SEMI JOIN (SELECT unnest($gpus) AS gpu_uuid) g ON g.gpu_uuid = e.gpu_uuid
LEFT JOIN slices_on_noted_tenant($start, $end) s ON s.hour = e.hour AND s.gpu_uuid = e.gpu_uuid
GROUP BY e.hour, e.gpu_uuid, e.node, e.what, e.degraded
ORDER BY e.hour DESC, e.gpu_uuid;
