-- Raw samples older than the retention horizon (parameter: cutoff ts_ms); rollups stay.
DELETE FROM raw_gpu WHERE ts_ms < $cutoff;
DELETE FROM raw_slice WHERE ts_ms < $cutoff;
