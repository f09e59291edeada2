-- Money kept: per GPU-hour and slice-hour, the integer inputs of the bill for every basis
-- and share kind, computed from the hour rollups when a fold changes them
-- (sql/ingest/keep_money.sql), so that a bill sums kept integers instead of recomputing
-- every hour of the month (docs/live-bill.md, Kept money). No currency: prices, the tenant
-- attribution and the idle policy are applied when a bill reads them, so a catalog change
-- needs no recomputation.
-- Micro-GPU-seconds as in sql/views/100_chargeback.sql: a_* allocation shares (dominant,
-- memory, cores), u usage, m_* max(allocation, usage) per slice-hour; *_tot their sums on
-- the GPU-hour before scaling, sc_* the sums of the scaled shares (what the slices are billed
-- where the total is above the capacity). src_* copy what the rollup rows held when kept
-- (row count, samples, latest sample): a bill compares their sums with the rollups' to tell
-- whether the kept hours are current. No key index: the keeping statements replace a
-- GPU-hour's rows whole, and an index over every slice-hour would cost more memory than the
-- bill it serves.

CREATE TABLE IF NOT EXISTS kept_gpu_hour (
    hour          TIMESTAMP NOT NULL,
    gpu_uuid      VARCHAR   NOT NULL,
    cluster       VARCHAR   NOT NULL,   -- placement: the GPU row's, else the longest slice's
    node          VARCHAR   NOT NULL,
    model         VARCHAR,              -- the GPU row's; NULL: looked up when billed (cross-hour)
    has_gpu_row   BOOLEAN   NOT NULL,
    gpu_metered_s DOUBLE    NOT NULL,
    metered_s     DOUBLE    NOT NULL,
    energy_joules DOUBLE,
    a_dom_tot BIGINT NOT NULL, a_mem_tot BIGINT NOT NULL, a_cores_tot BIGINT NOT NULL, u_tot BIGINT NOT NULL,
    m_dom_tot BIGINT NOT NULL, m_mem_tot BIGINT NOT NULL, m_cores_tot BIGINT NOT NULL,
    sc_a_dom BIGINT NOT NULL, sc_a_mem BIGINT NOT NULL, sc_a_cores BIGINT NOT NULL, sc_u BIGINT NOT NULL,
    sc_m_dom BIGINT NOT NULL, sc_m_mem BIGINT NOT NULL, sc_m_cores BIGINT NOT NULL,
    slice_rows    BIGINT    NOT NULL,
    src_rows      BIGINT    NOT NULL,   -- 1 with a gpu_hour row, else 0
    src_samples   BIGINT    NOT NULL,
    src_latest_ms BIGINT    NOT NULL
);

-- Per slice-hour, its shares scaled on its GPU-hour and its energy, per share kind; placed
-- as its GPU-hour (p_*), attributed to a tenant by its own cluster and namespace when billed.
CREATE TABLE IF NOT EXISTS kept_slice_hour (
    hour          TIMESTAMP NOT NULL,
    gpu_uuid      VARCHAR   NOT NULL,
    pod_uid       VARCHAR   NOT NULL,
    container     VARCHAR   NOT NULL,
    cluster       VARCHAR   NOT NULL,
    namespace     VARCHAR,
    pod           VARCHAR,
    p_cluster     VARCHAR   NOT NULL,
    p_node        VARCHAR   NOT NULL,
    p_model       VARCHAR,
    a_dom BIGINT NOT NULL, a_mem BIGINT NOT NULL, a_cores BIGINT NOT NULL, u BIGINT NOT NULL,
    m_dom BIGINT NOT NULL, m_mem BIGINT NOT NULL, m_cores BIGINT NOT NULL,
    e_dom BIGINT NOT NULL, e_mem BIGINT NOT NULL, e_cores BIGINT NOT NULL,
    src_samples   BIGINT    NOT NULL,
    src_latest_ms BIGINT    NOT NULL
);
