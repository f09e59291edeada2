-- Rollup deltas waiting to be folded into gpu_hour, slice_hour and gpu_inventory.
-- Each batch appends its deltas here in the transaction that stores its raw rows and
-- offsets (sql/ingest/apply_batch.sql), so exactly-once is unchanged; every few batches,
-- and at every flush (stop, snapshot, rebalance, retention), one transaction merges them
-- into the rollups and empties these tables (sql/ingest/fold_rollups.sql). An upsert costs
-- about the same for 700 rows as for 7,000 (measured: 10 batches' slice-hour deltas, 33-47 ms
-- per statement either way), so folding ten batches at once costs a tenth.
-- A read-write connection folds what a stopped or crashed ingest left here (store/).
-- Columns: those of the per-batch deltas (sql/ingest/batch_*_hours.sql, batch_inventory.sql).
CREATE TABLE IF NOT EXISTS gpu_hour_pending AS SELECT minute AS hour, * EXCLUDE (minute) FROM gpu_minute_part LIMIT 0;
CREATE TABLE IF NOT EXISTS slice_hour_pending AS SELECT minute AS hour, * EXCLUDE (minute) FROM slice_minute_part LIMIT 0;
-- merged gpu_inventory rows as the consumer computed them: each later one of a GPU already
-- includes the earlier ones (sql/ingest/batch_inventory.sql)
CREATE TABLE IF NOT EXISTS gpu_inventory_pending AS SELECT * FROM gpu_inventory LIMIT 0;
