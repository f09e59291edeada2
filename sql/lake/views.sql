-- The store's tables as a DuckLake presents them (store/lake.py), shadowing the lake's own
-- tables of these names for every query of the connection (TEMP objects are found first).
-- Ingest workers only ever append to a lake (two appends to one table never conflict;
-- a delete or an upsert conflicts with any concurrent append), so what a single-file store
-- keeps up to date in place is derived here on read:
-- string ids: two workers may append the same new (id, value) pair (ids are hashes of the
-- value, the same in every worker);
CREATE OR REPLACE TEMP VIEW lake_strings_unscoped AS SELECT DISTINCT id, value FROM lake.main.ingest_strings;
CREATE OR REPLACE TEMP VIEW ingest_strings AS SELECT * FROM lake_strings_unscoped;

-- offsets: a row per partition per batch; the one of the latest commit wins (snapshot_id,
-- DuckLake's per-row commit number: a partition read again from its log start after the
-- log was replaced restarts lower, sql/lake/reset_offset.sql);
CREATE OR REPLACE TEMP VIEW ingest_offsets AS
SELECT topic, "partition", next_offset, last_digest FROM lake.main.ingest_offsets
QUALIFY row_number() OVER (PARTITION BY topic, "partition" ORDER BY snapshot_id DESC, next_offset DESC) = 1;

-- the GPU inventory: each GPU's latest merged row (sql/ingest/batch_inventory.sql);
CREATE OR REPLACE TEMP VIEW gpu_inventory AS
SELECT * FROM lake.main.gpu_inventory_pending
QUALIFY row_number() OVER (PARTITION BY gpu_uuid_id ORDER BY last_seen_ms DESC, first_seen_ms) = 1;

-- hour rollups: every batch's deltas merged, the merge the single-file store's fold
-- applies (sql/ingest/fold_rollups.sql), columns in the order of sql/schema/001_contract.sql;
-- of the deltas in `tbl` (all of them, or a batch's touched GPU-hours': sql/lake/keep_money.sql).
CREATE OR REPLACE TEMP MACRO lake_gpu_hours(tbl, strings := 'ingest_strings') AS TABLE
SELECT bucket AS hour, cluster, node, gpu_uuid, model, memory_total_bytes, least(3600, metered_s) AS metered_s,
       sample_count, sm_util_s, memory_used_byte_s,
       hour_energy(first_energy_j, last_energy_j, first_power_j, power_j) AS energy_joules, power_j,
       first_ts_ms, first_energy_j, first_power_j, last_ts_ms, last_energy_j, latest_ts_ms, driver,
       xid_events, xid_critical_count, xid_critical_ts_ms, xid_critical_code, ecc_agg_first_ts_ms, ecc_agg_first,
       ecc_agg_last_ts_ms, ecc_agg_last, ecc_agg_max, ecc_vol_first_ts_ms, ecc_vol_first, ecc_vol_last_ts_ms,
       ecc_vol_last, ecc_vol_max, throttled_s, lost_s, temperature_max_celsius, unhealthy_s, health_unknown_s
FROM gpu_partials_named(tbl, strings);

CREATE OR REPLACE TEMP MACRO lake_slice_hours(tbl, strings := 'ingest_strings') AS TABLE
SELECT bucket AS hour, * EXCLUDE (bucket) REPLACE (least(3600, metered_s) AS metered_s)
FROM slice_partials_named(tbl, strings);

-- The hour rows from the lake's own tables by their qualified names: what a tenant's scope
-- (sql/scope/tenant.sql) narrows, once every table of the lake is hidden behind an empty view.
-- No reader's query names them: a reader reads gpu_hour and slice_hour.
CREATE OR REPLACE TEMP VIEW lake_gpu_deltas_unscoped AS
SELECT hour AS bucket, * EXCLUDE (hour) FROM lake.main.gpu_hour_pending;
CREATE OR REPLACE TEMP VIEW lake_slice_deltas_unscoped AS
SELECT hour AS bucket, * EXCLUDE (hour) FROM lake.main.slice_hour_pending;
CREATE OR REPLACE TEMP VIEW unscoped_gpu_hour AS
SELECT * FROM lake_gpu_hours('lake_gpu_deltas_unscoped', 'lake_strings_unscoped');
CREATE OR REPLACE TEMP VIEW unscoped_slice_hour AS
SELECT * FROM lake_slice_hours('lake_slice_deltas_unscoped', 'lake_strings_unscoped');

CREATE OR REPLACE TEMP VIEW gpu_hour AS SELECT * FROM unscoped_gpu_hour;
CREATE OR REPLACE TEMP VIEW slice_hour AS SELECT * FROM unscoped_slice_hour;

-- money kept (sql/schema/060_kept_money.sql): each batch appends the kept rows of the
-- GPU-hours it touched, whole (sql/lake/keep_money.sql); a GPU-hour's kept rows are those
-- of its latest commit. A worker keeps what its transaction sees, so two workers touching
-- one GPU-hour at once (a partition changing hands) may leave it behind the rollups: a bill
-- then finds the month not current (kept_current) and computes it from the rollups, until
-- a later batch or `slicemeter keep` keeps the hour again.
CREATE OR REPLACE TEMP VIEW kept_gpu_hour AS
SELECT * FROM lake.main.kept_gpu_hour
QUALIFY snapshot_id = max(snapshot_id) OVER (PARTITION BY hour, gpu_uuid);

CREATE OR REPLACE TEMP VIEW kept_slice_hour AS
SELECT k.* FROM lake.main.kept_slice_hour k
SEMI JOIN (SELECT hour, gpu_uuid, max(snapshot_id) AS version FROM lake.main.kept_gpu_hour GROUP BY ALL) v
    ON v.hour = k.hour AND v.gpu_uuid = k.gpu_uuid AND v.version = k.snapshot_id;

-- partition owners (sql/schema/101_partition_owners.sql): a partition's latest epoch's row;
-- the fence row (topic '') is none.
CREATE OR REPLACE TEMP VIEW ingest_partition_owner AS
SELECT topic, "partition", epoch, owner, taken_at FROM lake.main.ingest_partition_owners WHERE topic <> ''
QUALIFY row_number() OVER (PARTITION BY topic, "partition" ORDER BY epoch DESC, snapshot_id DESC) = 1;
