-- Keep the money of the GPU-hours named in lake_touched_ids (hour, gpu_uuid_id) on a lake:
-- the lake counterpart of sql/ingest/keep_money.sql, in the transaction of the batch that
-- touched them (ingest/writer.py, write_lake). Nothing is deleted (a delete would conflict
-- with the other workers' appends): the touched GPU-hours' kept rows are appended whole and
-- the latest commit's are read (sql/lake/views.sql). Only the touched GPU-hours' deltas
-- are merged, this transaction's own included.
CREATE OR REPLACE TEMP TABLE lake_touched_gpu_partials AS
SELECT p.hour AS bucket, p.* EXCLUDE (hour)
FROM lake.main.gpu_hour_pending p SEMI JOIN lake_touched_ids t ON t.hour = p.hour AND t.gpu_uuid_id = p.gpu_uuid_id;
CREATE OR REPLACE TEMP TABLE lake_touched_slice_partials AS
SELECT p.hour AS bucket, p.* EXCLUDE (hour)
FROM lake.main.slice_hour_pending p SEMI JOIN lake_touched_ids t ON t.hour = p.hour AND t.gpu_uuid_id = p.gpu_uuid_id;
CREATE OR REPLACE TEMP TABLE lake_touched_gpu_hours AS SELECT * FROM lake_gpu_hours('lake_touched_gpu_partials');
CREATE OR REPLACE TEMP TABLE lake_touched_slice_hours AS SELECT * FROM lake_slice_hours('lake_touched_slice_partials');
DELETE FROM kept_touched_t;
INSERT INTO kept_touched_t
SELECT DISTINCT t.hour, s.value FROM lake_touched_ids t JOIN ingest_strings s ON s.id = t.gpu_uuid_id;
DELETE FROM kept_hour_t;
INSERT INTO kept_hour_t BY NAME SELECT * FROM kept_hours_of_touched('lake_touched_gpu_hours', 'lake_touched_slice_hours');
CREATE OR REPLACE TEMP TABLE lake_kept_slices AS SELECT * FROM kept_slices_of_touched('lake_touched_slice_hours');
INSERT INTO lake.main.kept_slice_hour BY NAME SELECT * FROM lake_kept_slices;
INSERT INTO lake.main.kept_gpu_hour BY NAME SELECT * FROM kept_gpu_rows_of_touched('lake_kept_slices');
DELETE FROM kept_hour_t;
DELETE FROM kept_touched_t;
DROP TABLE lake_touched_gpu_partials;
DROP TABLE lake_touched_slice_partials;
DROP TABLE lake_touched_gpu_hours;
DROP TABLE lake_touched_slice_hours;
DROP TABLE lake_kept_slices;
