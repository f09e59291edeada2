-- One ingest batch, run inside the transaction that also stores the Kafka offsets.
-- Inputs (Arrow, made by ingest/writer.py prepare on the consumer's thread while the
-- previous batch was being written): batch_strings (id, value) new string ids, batch_gpu
-- (slicemeter.tick columns, strings replaced by *_id integers),
-- batch_inventory (sql/ingest/batch_inventory.sql), gpu_hour_delta and slice_hour_delta
-- (sql/ingest/batch_gpu_hours.sql, batch_slice_hours.sql).
-- Here: append the raw GPU rows (the slice rows: sql/ingest/store_slice_rows.sql) and the
-- inventory and hour deltas (folded in by sql/ingest/fold_rollups.sql). Minute rollups
-- are not written here: they are views over the raw rows, materialised when retention
-- deletes those rows (sql/ingest/retention.sql) -- aggregating every batch to the minute
-- and appending the partials cost more than the raw insert itself.

INSERT INTO ingest_strings SELECT id, value FROM batch_strings;
INSERT INTO raw_gpu_rows BY NAME SELECT * FROM batch_gpu;
-- Rollup deltas wait to be folded in (sql/ingest/fold_rollups.sql): one upsert for many
-- batches costs about what one batch's did (sql/schema/004_pending_rollups.sql).
INSERT INTO gpu_inventory_pending BY NAME SELECT * FROM batch_inventory;
INSERT INTO gpu_hour_pending BY NAME SELECT * FROM gpu_hour_delta;
INSERT INTO slice_hour_pending BY NAME SELECT * FROM slice_hour_delta;
