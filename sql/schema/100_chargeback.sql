-- Chargeback: closed (frozen) months.
-- Closing a month copies the rollups it was billed from (with the tenant attribution of
-- that moment) and the price catalog text, so a closed month's files can be regenerated
-- byte for byte forever, whatever arrives or changes later. Data that arrives later for
-- a closed month is found by comparing live rows with the latest frozen copy and billed
-- as Correction rows in the next open month (docs/chargeback.md).

CREATE TABLE IF NOT EXISTS closed_months (
    month         DATE      PRIMARY KEY,   -- first day of the month
    closed_at     TIMESTAMP NOT NULL,
    prices_yaml   VARCHAR   NOT NULL,      -- the catalog the month was closed with
    prices_sha    VARCHAR   NOT NULL
);

-- as_of = the invoice month whose close froze this copy of month `data_month`'s rows:
-- the month itself when it closed, and each later month whose close carried corrections
-- for it. The latest as_of <= M is what M's invoice has already billed.
CREATE TABLE IF NOT EXISTS frozen_gpu_hour (
    as_of          DATE      NOT NULL,
    data_month     DATE      NOT NULL,
    hour           TIMESTAMP NOT NULL,
    cluster        VARCHAR   NOT NULL,
    node           VARCHAR   NOT NULL,
    gpu_uuid       VARCHAR   NOT NULL,
    model          VARCHAR,
    metered_s      DOUBLE    NOT NULL,
    energy_joules  DOUBLE,
    PRIMARY KEY (as_of, hour, gpu_uuid)
);

CREATE TABLE IF NOT EXISTS frozen_slice_hour (
    as_of                  DATE      NOT NULL,
    data_month             DATE      NOT NULL,
    tenant                 VARCHAR   NOT NULL,
    hour                   TIMESTAMP NOT NULL,
    cluster                VARCHAR   NOT NULL,
    node                   VARCHAR   NOT NULL,
    gpu_uuid               VARCHAR   NOT NULL,
    namespace              VARCHAR,
    pod                    VARCHAR,
    pod_uid                VARCHAR   NOT NULL,
    container              VARCHAR   NOT NULL,
    whole_gpu              BOOLEAN   NOT NULL,
    metered_s              DOUBLE    NOT NULL,
    alloc_mem_share_s      DOUBLE    NOT NULL,
    alloc_cores_share_s    DOUBLE    NOT NULL,
    alloc_dominant_share_s DOUBLE    NOT NULL,
    usage_share_s          DOUBLE    NOT NULL,
    hami_nvml_disagree_s   DOUBLE    NOT NULL,
    PRIMARY KEY (as_of, hour, gpu_uuid, pod_uid, container)
);
