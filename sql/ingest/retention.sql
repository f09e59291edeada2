-- Raw samples older than the retention horizon ($cutoff, epoch ms); rollups stay.
-- One statement per line group: ingest/writer.py runs them one by one with the parameter.
DELETE FROM raw_gpu WHERE ts_ms < $cutoff;
DELETE FROM raw_slice WHERE ts_ms < $cutoff;
