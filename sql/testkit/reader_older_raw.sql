-- Copy number $copy of the generated month's raw samples, shifted $copy times $days days
-- back (bench/bench_reader_refresh.py): what a longer raw retention holds.
INSERT INTO raw_gpu_rows SELECT * REPLACE (ts_ms - $copy * $days::BIGINT * 86400000 AS ts_ms)
FROM raw_gpu_rows WHERE ts_ms >= $start_ms;

INSERT INTO raw_slice_rows SELECT * REPLACE (ts_ms - $copy * $days::BIGINT * 86400000 AS ts_ms)
FROM raw_slice_rows WHERE ts_ms >= $start_ms;
