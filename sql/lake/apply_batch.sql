-- One ingest batch in one DuckLake transaction (store/lake.py): the lake counterpart of
-- sql/ingest/apply_batch.sql, save_offsets.sql and store_slice_rows.sql. Every statement
-- appends, so workers of one consumer group commit side by side without conflicts
-- (DuckLake fails a commit only where another one deleted from or altered a table this
-- one inserted into). Shadowed names (sql/lake/views.sql) are written through their lake
-- tables, `lake.main.*`. Inputs: those of sql/ingest/apply_batch.sql, the slice rows as
-- batch_slice_rows (Parquet files need no whole row groups: nothing is held back).
INSERT INTO lake.main.ingest_strings SELECT id, value FROM batch_strings;
INSERT INTO raw_gpu_rows BY NAME SELECT * FROM batch_gpu;
INSERT INTO raw_slice_rows BY NAME SELECT * FROM batch_slice_rows;
INSERT INTO gpu_inventory_pending BY NAME SELECT * FROM batch_inventory;
INSERT INTO gpu_hour_pending BY NAME SELECT * FROM gpu_hour_delta;
INSERT INTO slice_hour_pending BY NAME SELECT * FROM slice_hour_delta;
-- the GPU-hours this batch touched, whose money is kept next (sql/lake/keep_money.sql)
CREATE OR REPLACE TEMP TABLE lake_touched_ids AS
SELECT hour, gpu_uuid_id FROM gpu_hour_delta UNION SELECT hour, gpu_uuid_id FROM slice_hour_delta;
