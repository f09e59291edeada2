-- Raw samples older than the retention horizon (parameter cutoff, epoch ms). Rollups stay:
-- hours are kept up to date per batch, and the minutes of the rows about to be deleted are
-- appended to *_minute_part first, in the same transaction (sql/views/011_ingest.sql).
-- ingest/writer.py runs the statements one by one (DuckDB binds one statement per call).
-- A node's instants (sql/schema/022_ingest_instants.sql) go at $instants_cutoff, the oldest
-- instant the timestamp window still accepts, never before their raw samples.
INSERT INTO gpu_minute_part BY NAME SELECT * FROM gpu_minute_of_raw($cutoff);
INSERT INTO slice_minute_part BY NAME SELECT * FROM slice_minute_of_raw($cutoff);
DELETE FROM raw_gpu_rows WHERE ts_ms < $cutoff;
DELETE FROM raw_slice_rows WHERE ts_ms < $cutoff;
DELETE FROM raw_slice_tail WHERE ts_ms < $cutoff;
DELETE FROM ingest_instants WHERE ts_ms < $instants_cutoff;
