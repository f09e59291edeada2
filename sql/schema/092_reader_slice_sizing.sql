-- Per slice-day, what right-sizing reads (sql/rightsizing/slices.sql): the metered hours'
-- sums, each changing attribute's latest value with its hour (arg_max over days gives the
-- month's), and the hours' values the percentiles are taken over. A month's nearest-rank
-- percentiles do not add up from daily ones, so the day keeps its hourly values (at most 24
-- a slice); the month's are taken over the days' lists, one row per slice-day instead of one
-- per slice-hour. Filled in the readers' file like the other day figures
-- (sql/schema/090_reader_days.sql), from slice_sizing_days_of_hours (sql/views/305_day_figures.sql).
CREATE TABLE IF NOT EXISTS reader_slice_sizing_day (
    day                    TIMESTAMP NOT NULL,
    gpu_uuid               VARCHAR,
    pod_uid                VARCHAR,
    container              VARCHAR,
    cluster                VARCHAR,
    node                   VARCHAR,
    namespace              VARCHAR,
    pod                    VARCHAR,
    hours                  BIGINT NOT NULL,   -- metered hours (metered_s > 0)
    first_hour             TIMESTAMP,
    last_hour              TIMESTAMP,
    metered_s              DOUBLE,
    usage_share_s          DOUBLE,
    alloc_dominant_share_s DOUBLE,
    whole_gpu              BOOLEAN,
    -- the latest non-NULL value of the day and its hour
    alloc_memory_bytes     BIGINT,  alloc_memory_hour     TIMESTAMP,
    alloc_cores_ratio      FLOAT,   alloc_cores_hour      TIMESTAMP,
    alloc_mem_share        DOUBLE,  alloc_mem_share_hour  TIMESTAMP,   -- alloc_mem_share_s / metered_s
    alloc_cores_share      DOUBLE,  alloc_cores_share_hour TIMESTAMP,  -- alloc_cores_share_s / metered_s
    last_kernel_age_s      FLOAT,             -- at last_hour, NULL included (never ran a kernel)
    mem_max                DOUBLE,
    sm_max                 DOUBLE,
    mem_values             DOUBLE[],          -- per metered hour, in no order: the peak, else the mean, bytes
    sm_values              DOUBLE[]           -- per metered hour: the mean SM share
);
