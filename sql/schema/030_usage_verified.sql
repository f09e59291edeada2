-- Whether a slice's usage could be checked against NVML's processes (Tick 1.1
-- `usage_verified`; docs/security.md). Raw rows keep the flag as sent (NULL: an older
-- exporter, unknown); rollups count the seconds it was false, so a bill can say which
-- usage-basis charges rest on figures nobody could check. Unknown seconds are not counted:
-- an older exporter's rows are neither verified nor flagged.
ALTER TABLE raw_slice_rows ADD COLUMN IF NOT EXISTS usage_verified BOOLEAN;
ALTER TABLE raw_slice_tail ADD COLUMN IF NOT EXISTS usage_verified BOOLEAN;
ALTER TABLE slice_minute_part ADD COLUMN IF NOT EXISTS usage_unverified_s DOUBLE DEFAULT 0;
ALTER TABLE slice_hour_pending ADD COLUMN IF NOT EXISTS usage_unverified_s DOUBLE DEFAULT 0;
ALTER TABLE slice_hour ADD COLUMN IF NOT EXISTS usage_unverified_s DOUBLE DEFAULT 0;
-- A closed month's unverified seconds, frozen beside frozen_slice_hour (sql/chargeback/freeze.sql)
-- with its key: a table of its own because this migration runs before the chargeback one on a
-- new store, and after it on an older one.
CREATE TABLE IF NOT EXISTS frozen_slice_unverified (
    as_of              DATE      NOT NULL,
    hour               TIMESTAMP NOT NULL,
    gpu_uuid           VARCHAR   NOT NULL,
    pod_uid            VARCHAR   NOT NULL,
    container          VARCHAR   NOT NULL,
    usage_unverified_s DOUBLE    NOT NULL,
    PRIMARY KEY (as_of, hour, gpu_uuid, pod_uid, container)
);
