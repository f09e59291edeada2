-- The stored contract: hourly rollups and the catalog every report reads.
-- Ingest fills these; chargeback, exports, the dashboard and recommend read them.
-- All timestamps are UTC (TIMESTAMP without zone, by convention UTC).
-- "share-seconds" columns are Σ share × dt over the samples in the bucket, so that
-- late or out-of-order Ticks add into a bucket and a bucket's average share is
-- share_s / metered_s. Shares are fractions of the physical GPU in [0, 1].

CREATE TABLE IF NOT EXISTS gpu_hour (
    hour               TIMESTAMP NOT NULL,   -- UTC, truncated to the hour
    cluster            VARCHAR   NOT NULL,   -- tenant cluster identity from the Tick
    node               VARCHAR   NOT NULL,
    gpu_uuid           VARCHAR   NOT NULL,
    model              VARCHAR,
    memory_total_bytes BIGINT,
    metered_s          DOUBLE    NOT NULL,   -- seconds of this hour covered by samples (<= 3600)
    sample_count       BIGINT    NOT NULL,
    sm_util_s          DOUBLE,               -- Σ NVML sm_util_ratio × dt
    memory_used_byte_s DOUBLE,               -- Σ NVML memory_used_bytes × dt
    energy_joules      DOUBLE,               -- energy used in the hour (counter deltas; power × dt where no delta)
    PRIMARY KEY (hour, gpu_uuid)
);

CREATE TABLE IF NOT EXISTS slice_hour (
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
    sample_count           BIGINT    NOT NULL,
    -- allocation (what HAMi granted; whole-GPU slices count 1 for every share)
    alloc_memory_bytes     BIGINT,               -- last seen grant
    alloc_cores_ratio      REAL,
    alloc_mem_share_s      DOUBLE NOT NULL,      -- Σ alloc_memory / GPU memory × dt
    alloc_cores_share_s    DOUBLE NOT NULL,      -- Σ alloc_cores_ratio × dt
    alloc_dominant_share_s DOUBLE NOT NULL,      -- Σ max(mem share, cores share) × dt
    -- usage (memory from NVML where HAMi's self-reported figure disagrees beyond tolerance)
    used_mem_share_s       DOUBLE NOT NULL,      -- Σ min(1, trusted memory used / GPU memory) × dt
    used_sm_share_s        DOUBLE NOT NULL,      -- Σ min(1, sm_util_ratio) × dt
    usage_share_s          DOUBLE NOT NULL,      -- Σ max(mem share, sm share) × dt
    memory_used_byte_s     DOUBLE,               -- Σ trusted memory used × dt
    memory_used_max_bytes  BIGINT,
    sm_util_max            REAL,
    hami_nvml_disagree_s   DOUBLE NOT NULL,      -- seconds HAMi and NVML memory disagreed
    last_kernel_age_s      REAL,                 -- at the latest sample of the hour; NULL = never
    latest_ts_ms           BIGINT,
    PRIMARY KEY (hour, gpu_uuid, pod_uid, container)
);

-- Tenant catalog (Kamaji TenantControlPlanes). Ticks name a cluster; the catalog maps
-- cluster identities (API server URL or "tcp_namespace/tcp_name") to tenants.
CREATE TABLE IF NOT EXISTS tenants (
    tenant        VARCHAR PRIMARY KEY,
    display_name  VARCHAR,
    tcp_namespace VARCHAR,
    tcp_name      VARCHAR,
    api_server    VARCHAR,
    cost_center   VARCHAR
);

-- Optional: a namespace of a cluster billed to another tenant than the cluster's.
CREATE TABLE IF NOT EXISTS tenant_namespace_overrides (
    cluster   VARCHAR NOT NULL,
    namespace VARCHAR NOT NULL,
    tenant    VARCHAR NOT NULL,
    PRIMARY KEY (cluster, namespace)
);

CREATE TABLE IF NOT EXISTS dead_letters (
    received_at TIMESTAMP NOT NULL,
    topic       VARCHAR,
    "partition" INTEGER,
    "offset"    BIGINT,
    key         BLOB,
    payload     BLOB,
    error       VARCHAR NOT NULL
);

-- Kafka offsets consumed, written in the same transaction as the rows they produced.
CREATE TABLE IF NOT EXISTS ingest_offsets (
    topic        VARCHAR NOT NULL,
    "partition"  INTEGER NOT NULL,
    next_offset  BIGINT  NOT NULL,
    PRIMARY KEY (topic, "partition")
);
