-- DRA in the rollups (docs/dra.md, "In the bill"): a slice-hour keeps the claim and driver of
-- its latest sample that named them, and the seconds its usage was unknown (no HAMi, NVML or
-- utilisation reading at all: a device no reader serves); a GPU-hour keeps its driver.
-- Strings are ids in the partial tables (as every dictionary column), text in the hour tables.
-- Columns are appended in this order to the rollup macros' output (sql/views/011_ingest.sql).
ALTER TABLE gpu_minute_part ADD COLUMN IF NOT EXISTS driver_id INTEGER;
ALTER TABLE gpu_hour_pending ADD COLUMN IF NOT EXISTS driver_id INTEGER;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS driver VARCHAR;
ALTER TABLE slice_minute_part ADD COLUMN IF NOT EXISTS claim_id INTEGER;
ALTER TABLE slice_minute_part ADD COLUMN IF NOT EXISTS driver_id INTEGER;
ALTER TABLE slice_minute_part ADD COLUMN IF NOT EXISTS usage_unknown_s DOUBLE DEFAULT 0;
ALTER TABLE slice_hour_pending ADD COLUMN IF NOT EXISTS claim_id INTEGER;
ALTER TABLE slice_hour_pending ADD COLUMN IF NOT EXISTS driver_id INTEGER;
ALTER TABLE slice_hour_pending ADD COLUMN IF NOT EXISTS usage_unknown_s DOUBLE DEFAULT 0;
ALTER TABLE slice_hour ADD COLUMN IF NOT EXISTS claim VARCHAR;
ALTER TABLE slice_hour ADD COLUMN IF NOT EXISTS driver VARCHAR;
ALTER TABLE slice_hour ADD COLUMN IF NOT EXISTS usage_unknown_s DOUBLE DEFAULT 0;
-- A closed month's DRA columns, frozen beside frozen_slice_hour and frozen_gpu_hour
-- (sql/chargeback/freeze.sql) with their keys: tables of their own because this migration
-- runs before the chargeback one on a new store, and after it on an older one. Only rows
-- with something to keep are frozen (a claim, a driver, unknown usage).
CREATE TABLE IF NOT EXISTS frozen_slice_dra (
    as_of           DATE      NOT NULL,
    hour            TIMESTAMP NOT NULL,
    gpu_uuid        VARCHAR   NOT NULL,
    pod_uid         VARCHAR   NOT NULL,
    container       VARCHAR   NOT NULL,
    claim           VARCHAR,
    driver          VARCHAR,
    usage_unknown_s DOUBLE    NOT NULL,
    PRIMARY KEY (as_of, hour, gpu_uuid, pod_uid, container)
);
CREATE TABLE IF NOT EXISTS frozen_gpu_driver (
    as_of    DATE      NOT NULL,
    hour     TIMESTAMP NOT NULL,
    gpu_uuid VARCHAR   NOT NULL,
    driver   VARCHAR   NOT NULL,
    PRIMARY KEY (as_of, hour, gpu_uuid)
);
