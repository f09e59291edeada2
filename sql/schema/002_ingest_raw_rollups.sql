-- Ingest-owned storage: raw samples, minute rollups, GPU inventory, and the
-- accumulators gpu_hour needs to compute energy from counter deltas incrementally.
-- Raw samples store every low-cardinality string (node, cluster, GPU, pod, namespace,
-- container, model, source) as an id into ingest_strings: the wire already carries them
-- dictionary-encoded, so ingest maps each message's small dictionary once and never touches
-- a string per row. Measured here: integer columns insert ~1.5-2.7 M rows/s, the same rows as
-- VARCHAR ~0.5-0.9 M rows/s, and the rollup GROUP BYs hash integers instead of strings.
-- Readers use the TEMP views raw_gpu / raw_slice (sql/views/011_ingest.sql), which put the
-- strings back.

CREATE TABLE IF NOT EXISTS ingest_strings (
    id    INTEGER PRIMARY KEY,
    value VARCHAR NOT NULL
);

CREATE TABLE IF NOT EXISTS raw_gpu_rows (
    ts_ms              BIGINT   NOT NULL,
    interval_ms        INTEGER  NOT NULL,
    node_id            INTEGER  NOT NULL,
    cluster_id         INTEGER  NOT NULL,
    gpu_uuid_id        INTEGER  NOT NULL,
    gpu_index          SMALLINT NOT NULL,
    model_id           INTEGER,
    memory_total_bytes BIGINT,
    memory_used_bytes  BIGINT,
    sm_util_ratio      REAL,
    mem_util_ratio     REAL,
    power_watts        REAL,
    energy_joules      DOUBLE,
    slice_count        SMALLINT
);

CREATE TABLE IF NOT EXISTS raw_slice_rows (
    ts_ms                   BIGINT   NOT NULL,
    interval_ms             INTEGER  NOT NULL,
    node_id                 INTEGER  NOT NULL,
    cluster_id              INTEGER  NOT NULL,
    pod_uid_id              INTEGER  NOT NULL,
    pod_id                  INTEGER,
    namespace_id            INTEGER,
    container_id            INTEGER  NOT NULL,
    gpu_uuid_id             INTEGER  NOT NULL,
    vdevice_index           SMALLINT,
    hami_memory_limit_bytes BIGINT,
    hami_memory_used_bytes  BIGINT,
    hami_context_bytes      BIGINT,
    hami_module_bytes       BIGINT,
    hami_buffer_bytes       BIGINT,
    sm_limit_ratio          REAL,
    sm_util_ratio           REAL,
    last_kernel_age_s       REAL,
    process_count           SMALLINT,
    nvml_memory_used_bytes  BIGINT,
    alloc_memory_bytes      BIGINT,
    alloc_cores_ratio       REAL,
    whole_gpu               BOOLEAN,
    source_id               INTEGER
);

-- Every GPU ever seen, with its last known memory size: slice shares are fractions of it.
CREATE TABLE IF NOT EXISTS gpu_inventory (
    gpu_uuid_id        INTEGER PRIMARY KEY,
    cluster_id         INTEGER NOT NULL,
    node_id            INTEGER NOT NULL,
    gpu_index          SMALLINT,
    model_id           INTEGER,
    memory_total_bytes BIGINT,
    first_seen_ms      BIGINT NOT NULL,
    last_seen_ms       BIGINT NOT NULL
);

-- Minute rollups are append-only partial aggregates. While raw rows are retained, minutes
-- are aggregated from them on read (TEMP views gpu_minute / slice_minute,
-- sql/views/011_ingest.sql); retention appends the minutes of the rows it deletes here, in
-- the same transaction, so minutes are kept for ever without costing every batch. No
-- primary-key index: an ART index over a row per slice per minute for ever would break the
-- memory bound, and merging partials is exact because every column is a sum, a max, a min
-- or a value at the latest timestamp.
CREATE TABLE IF NOT EXISTS gpu_minute_part (
    minute             TIMESTAMP NOT NULL,
    gpu_uuid_id        INTEGER   NOT NULL,
    cluster_id         INTEGER   NOT NULL,
    node_id            INTEGER   NOT NULL,
    model_id           INTEGER,
    memory_total_bytes BIGINT,
    metered_s          DOUBLE    NOT NULL,
    sample_count       BIGINT    NOT NULL,
    sm_util_s          DOUBLE,
    memory_used_byte_s DOUBLE,
    power_j            DOUBLE,               -- Σ power × dt
    first_ts_ms        BIGINT,               -- earliest sample with an energy reading
    first_energy_j     DOUBLE,
    first_power_j      DOUBLE,               -- power × dt of that sample (its interval has no delta)
    last_ts_ms         BIGINT,
    last_energy_j      DOUBLE,
    latest_ts_ms       BIGINT    NOT NULL
);

CREATE TABLE IF NOT EXISTS slice_minute_part (
    minute                 TIMESTAMP NOT NULL,
    gpu_uuid_id            INTEGER   NOT NULL,
    pod_uid_id             INTEGER   NOT NULL,
    container_id           INTEGER   NOT NULL,
    cluster_id             INTEGER   NOT NULL,
    node_id                INTEGER   NOT NULL,
    namespace_id           INTEGER,
    pod_id                 INTEGER,
    whole_gpu              BOOLEAN   NOT NULL,
    metered_s              DOUBLE    NOT NULL,
    sample_count           BIGINT    NOT NULL,
    alloc_memory_bytes     BIGINT,
    alloc_cores_ratio      REAL,
    alloc_mem_share_s      DOUBLE    NOT NULL,
    alloc_cores_share_s    DOUBLE    NOT NULL,
    alloc_dominant_share_s DOUBLE    NOT NULL,
    used_mem_share_s       DOUBLE    NOT NULL,
    used_sm_share_s        DOUBLE    NOT NULL,
    usage_share_s          DOUBLE    NOT NULL,
    memory_used_byte_s     DOUBLE,
    memory_used_max_bytes  BIGINT,
    sm_util_max            REAL,
    hami_nvml_disagree_s   DOUBLE    NOT NULL,
    last_kernel_age_s      REAL,
    latest_ts_ms           BIGINT    NOT NULL
);

-- gpu_hour's energy_joules is derived from these (sql/ingest/apply_batch.sql).
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS power_j DOUBLE;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS first_ts_ms BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS first_energy_j DOUBLE;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS first_power_j DOUBLE;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS last_ts_ms BIGINT;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS last_energy_j DOUBLE;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS latest_ts_ms BIGINT;
