-- Each tenant's allocation GPU-hours on degraded GPU-hours in the month, and how many
-- degraded GPU-hours its slices sat on (sql/views/012_health.sql).
SELECT tenant, degraded_gpu_hours, degraded_gpu_hours_touched
FROM tenant_degraded_hours($start, $end, $throttled_share)
ORDER BY tenant;
