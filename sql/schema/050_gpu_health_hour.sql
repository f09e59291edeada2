-- Each GPU-hour's health (docs/health.md, In the bill), rolled up from the Tick 1.2 health
-- columns of the raw GPU rows (sql/schema/031_tick_1_2.sql) as gpu_hour's other columns are:
-- every batch's deltas, folded (sql/ingest/fold_rollups.sql), and every column a sum, a max,
-- or a value at its earliest / latest timestamp, so partials merge exactly.
-- The uncorrectable ECC counters keep their first, last and largest reading of the hour (and
-- when): an increase within the hour is the largest reading above the first, one across the
-- hour boundary the first reading above the previous hour's last (the health views of
-- sql/views/012_health.sql). A volatile counter resets with the driver, so a drop is never
-- an increase; the aggregate one survives reboots and is preferred where a board has it.
-- NULL where no sample carried the figure (an older exporter, a board without it).
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS xid_events BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS xid_critical_count BIGINT DEFAULT 0;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS xid_critical_ts_ms BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS xid_critical_code INTEGER;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_agg_first_ts_ms BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_agg_first BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_agg_last_ts_ms BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_agg_last BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_agg_max BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_vol_first_ts_ms BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_vol_first BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_vol_last_ts_ms BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_vol_last BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS ecc_vol_max BIGINT;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS throttled_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS lost_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS temperature_max_celsius FLOAT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS xid_events BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS xid_critical_count BIGINT DEFAULT 0;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS xid_critical_ts_ms BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS xid_critical_code INTEGER;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_agg_first_ts_ms BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_agg_first BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_agg_last_ts_ms BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_agg_last BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_agg_max BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_vol_first_ts_ms BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_vol_first BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_vol_last_ts_ms BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_vol_last BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS ecc_vol_max BIGINT;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS throttled_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS lost_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS temperature_max_celsius FLOAT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS xid_events BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS xid_critical_count BIGINT DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS xid_critical_ts_ms BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS xid_critical_code INTEGER;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_agg_first_ts_ms BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_agg_first BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_agg_last_ts_ms BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_agg_last BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_agg_max BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_vol_first_ts_ms BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_vol_first BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_vol_last_ts_ms BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_vol_last BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS ecc_vol_max BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS throttled_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS lost_s DOUBLE DEFAULT 0;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS temperature_max_celsius FLOAT;
-- A closed month's GPU-hour health, frozen beside frozen_gpu_hour (sql/chargeback/freeze.sql)
-- with what makes an hour degraded, so a closed month's credits never change: a table of its
-- own, as frozen_slice_unverified, because this migration runs before the chargeback one on
-- a new store and after it on an older one.
CREATE TABLE IF NOT EXISTS frozen_gpu_health (
    as_of                    DATE      NOT NULL,
    hour                     TIMESTAMP NOT NULL,
    gpu_uuid                 VARCHAR   NOT NULL,
    xid_critical_count       BIGINT    NOT NULL,
    ecc_uncorrected_increase BIGINT    NOT NULL,
    throttled_s              DOUBLE    NOT NULL,
    lost_s                   DOUBLE    NOT NULL,
    PRIMARY KEY (as_of, hour, gpu_uuid)
);
