-- Device health as Kubernetes reports it (Tick 1.3 `device_health`: the pod status's
-- allocatedResourcesStatus and ResourceClaim device conditions, any vendor; docs/health.md).
-- Raw GPU rows keep the code as sent (0 Healthy, 1 Unhealthy, 2 Unknown; NULL: nothing
-- reported it, or an older exporter); rollups count the seconds reported Unhealthy (a
-- degraded GPU-hour, as the NVML signals) and Unknown (shown, never counted), summed like
-- gpu_hour's other seconds (sql/ingest/fold_rollups.sql).
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS device_health TINYINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS unhealthy_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS health_unknown_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS unhealthy_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS health_unknown_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS unhealthy_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS health_unknown_s DOUBLE DEFAULT 0;
-- a closed month's unhealthy seconds, frozen with its other health (sql/chargeback/freeze.sql)
ALTER TABLE frozen_gpu_health ADD COLUMN IF NOT EXISTS unhealthy_s DOUBLE DEFAULT 0;
-- a readers' file's noted GPU-hours carry them (sql/schema/090_reader_days.sql)
ALTER TABLE reader_health_event ADD COLUMN IF NOT EXISTS unhealthy_s DOUBLE;
ALTER TABLE reader_health_event ADD COLUMN IF NOT EXISTS health_unknown_s DOUBLE;
