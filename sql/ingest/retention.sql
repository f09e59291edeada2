-- Raw samples older than the retention horizon (parameter cutoff, epoch ms). Rollups stay.
-- ingest/writer.py runs the statements one by one (DuckDB binds one statement per call).
DELETE FROM raw_gpu_rows WHERE ts_ms < $cutoff;
DELETE FROM raw_slice_rows WHERE ts_ms < $cutoff;
