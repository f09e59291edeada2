-- Keep the money of the GPU-hours named in kept_touched_t again (sql/views/101_kept_money.sql):
-- their kept rows are replaced whole from the rollups, then the set is emptied. Runs after
-- each fold in the fold's transaction (the fold names the GPU-hours it changed), and over a
-- range of hours for rollups written by other means (chargeback/kept.py).
DELETE FROM kept_hour_t;
INSERT INTO kept_hour_t BY NAME SELECT * FROM kept_hours_of_touched('gpu_hour', 'slice_hour');
DELETE FROM kept_slice_hour k USING kept_touched_t t WHERE k.hour = t.hour AND k.gpu_uuid = t.gpu_uuid;
INSERT INTO kept_slice_hour BY NAME SELECT * FROM kept_slices_of_touched('slice_hour');
DELETE FROM kept_gpu_hour k USING kept_touched_t t WHERE k.hour = t.hour AND k.gpu_uuid = t.gpu_uuid;
INSERT INTO kept_gpu_hour BY NAME SELECT * FROM kept_gpu_rows_of_touched('kept_slice_hour');
-- the hours changed, for the readers' file (sql/schema/080_reader_changes.sql): those of
-- the rollups the fold changed and of the money kept here
INSERT INTO reader_changes (hour)
SELECT DISTINCT hour FROM kept_touched_t
WHERE hour NOT IN (SELECT hour FROM reader_changes WHERE refresh IS NULL AND hour IS NOT NULL);
DELETE FROM kept_hour_t;
DELETE FROM kept_touched_t;
