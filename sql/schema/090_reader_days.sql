-- Day figures for readers: the hour rollups summed per day (per GPU, per slice) and per
-- cluster-hour, the money kept per hour (sql/schema/060_kept_money.sql) summed per
-- slice-day, and the GPU-hours with a health event, so that a month's page or bill reads
-- about 30 rows per GPU instead of 720 (docs/live-bill.md, Readers' day figures). Filled only in the readers' file: each refresh
-- recomputes the days of the hours it copied (store/reader_file.py) with the macros of
-- sql/views/305_day_figures.sql, whose column lists these tables follow. In the live store
-- they stay empty, and readers of the store (or of a lake) compute the same rows from the
-- hours (sql/views/310_days.sql).

CREATE TABLE IF NOT EXISTS reader_gpu_day (
    day           TIMESTAMP NOT NULL,
    cluster       VARCHAR,
    node          VARCHAR,
    gpu_uuid      VARCHAR,
    model         VARCHAR,
    driver        VARCHAR,
    hours         BIGINT  NOT NULL,   -- GPU-hour rows
    hour_mask     INTEGER NOT NULL,   -- bit h: a row for hour h of the day
    metered_s     DOUBLE,
    sm_util_s     DOUBLE,             -- NULL read as 0
    nvml_read     BOOLEAN,            -- any hour with an NVML reading
    energy_joules DOUBLE,             -- NULL: no hour with a reading
    slices        BIGINT,             -- slice rows over the day's hours
    max_slices    BIGINT,
    shared_hours  BIGINT,             -- hours with more than one slice
    alloc_s       DOUBLE,             -- per hour capped at the metered seconds, as dash_gpu_hour
    usage_s       DOUBLE,
    metered_ms    HUGEINT,            -- integer milliseconds, hour by hour, for the dividend's money
    in_use_ms     HUGEINT,            -- ... of the hours with at least one slice
    whole_gpu_ms  HUGEINT,            -- the slices' metered milliseconds
    idle_watts    DOUBLE              -- lowest mean power of an hour metered >= 600 s with energy
);

CREATE TABLE IF NOT EXISTS reader_slice_day (
    day               TIMESTAMP NOT NULL,
    gpu_uuid          VARCHAR,
    cluster           VARCHAR,
    node              VARCHAR,
    namespace         VARCHAR,
    pod               VARCHAR,
    pod_uid           VARCHAR,
    container         VARCHAR,
    gpu_cluster       VARCHAR,        -- the GPU row's cluster in those hours (NULL: no GPU row)
    model             VARCHAR,        -- the GPU row's model
    hours             BIGINT NOT NULL,
    first_hour        TIMESTAMP,
    last_hour         TIMESTAMP,
    latest_ts_ms      BIGINT,
    metered_s         DOUBLE,
    alloc_s           DOUBLE,         -- alloc_dominant_share_s
    usage_s           DOUBLE,         -- usage_share_s
    unverified_s      DOUBLE,         -- usage_unverified_s, NULL read as 0
    unused_s          DOUBLE,         -- per hour max(allocation - usage, 0)
    idle_s            DOUBLE,         -- metered seconds of the hours without SM use
    alloc_ms          BIGINT,         -- per hour round(allocation x 1000)
    -- the latest non-NULL value of the day and its hour (arg_max over days gives the month's)
    driver            VARCHAR, driver_hour     TIMESTAMP,
    claim             VARCHAR, claim_hour      TIMESTAMP,
    kernel_age_s      FLOAT,   kernel_hour     TIMESTAMP,
    allocation        DOUBLE,  allocation_hour TIMESTAMP   -- alloc_dominant_share_s / metered_s
);

CREATE TABLE IF NOT EXISTS reader_cluster_hour (
    hour                TIMESTAMP NOT NULL,
    cluster             VARCHAR,
    gpus                BIGINT,
    slices              BIGINT,
    metered_s           DOUBLE,
    sm_util_s           DOUBLE,
    alloc_s             DOUBLE,
    reserved_idle_s     DOUBLE,       -- per GPU-hour max(allocated - used, 0)
    unallocated_s       DOUBLE        -- per GPU-hour max(metered - max(allocated, used), 0)
);

-- kept_slice_hour summed per day, slice and placement (the bill's kept_calc_sums sums these
-- over the month); a slice-hour placed without a model keeps its hour, for the bill to find
-- the model it looked up. w_*: per hour max(allocation - usage, 0) of each share kind; the
-- rest what the bill's line says beside its money (sql/chargeback/slice_line_notes.sql).
CREATE TABLE IF NOT EXISTS reader_kept_slice_day (
    day        TIMESTAMP NOT NULL,
    model_hour TIMESTAMP,
    gpu_uuid VARCHAR, p_cluster VARCHAR, p_node VARCHAR, p_model VARCHAR,
    cluster VARCHAR, namespace VARCHAR, pod VARCHAR, pod_uid VARCHAR, container VARCHAR,
    a_dom HUGEINT, a_mem HUGEINT, a_cores HUGEINT, u HUGEINT, m_dom HUGEINT, m_mem HUGEINT, m_cores HUGEINT,
    e_dom HUGEINT, e_mem HUGEINT, e_cores HUGEINT, w_dom HUGEINT, w_mem HUGEINT, w_cores HUGEINT,
    n BIGINT NOT NULL,
    unverified_u BIGINT, unknown_u BIGINT,   -- of the slice-hours with something to say
    claim VARCHAR, claim_hour TIMESTAMP, driver VARCHAR, driver_hour TIMESTAMP
);

-- kept_gpu_hour summed per day and placement, what the bill's per-placement figures
-- (cb_gpu_agg) sum over the month: capacity and energy as the bill rounds them hour by hour,
-- and per share kind and basis what the slices were billed (their total, or where that is
-- above the capacity the sum of their scaled shares); the latest DRA driver of the GPU rows.
CREATE TABLE IF NOT EXISTS reader_kept_gpu_day (
    day TIMESTAMP NOT NULL, cluster VARCHAR, node VARCHAR, gpu_uuid VARCHAR, model VARCHAR,
    hours BIGINT NOT NULL, first_hour TIMESTAMP, last_hour TIMESTAMP, cap_u HUGEINT, energy_mj HUGEINT,
    b_alloc_dom HUGEINT, b_alloc_mem HUGEINT, b_alloc_cores HUGEINT, b_usage HUGEINT,
    b_max_dom HUGEINT, b_max_mem HUGEINT, b_max_cores HUGEINT,
    driver VARCHAR, driver_hour TIMESTAMP
);

-- The GPU-hours with something to say about their health (sql/views/012_health.sql
-- gpu_health_noted: an Xid, an uncorrectable ECC error, throttling, lost), with gpu_health's
-- columns, and the slice-hours on them. A refresh recomputes them from the first day it
-- changed onwards (an ECC reading changes the next reading's increase).
CREATE TABLE IF NOT EXISTS reader_health_event (
    hour TIMESTAMP NOT NULL, gpu_uuid VARCHAR, cluster VARCHAR, node VARCHAR, model VARCHAR, metered_s DOUBLE,
    xid_events BIGINT, xid_critical_count BIGINT, xid_critical_code INTEGER, ecc_uncorrected_increase BIGINT,
    throttled_s DOUBLE, lost_s DOUBLE, temperature_max_celsius FLOAT
);

CREATE TABLE IF NOT EXISTS reader_health_event_slice (
    hour TIMESTAMP NOT NULL, gpu_uuid VARCHAR, cluster VARCHAR, namespace VARCHAR, pod VARCHAR, pod_uid VARCHAR,
    container VARCHAR, alloc_dominant_share_s DOUBLE
);
