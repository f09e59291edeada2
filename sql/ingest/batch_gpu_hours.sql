-- One batch's GPU rows aggregated per GPU-hour (gpu_rollup: sql/views/011_ingest.sql):
-- the deltas the writer adds into gpu_hour. Input: batch_gpu.
SELECT bucket AS hour, * EXCLUDE (bucket) REPLACE (least(3600, metered_s) AS metered_s)
FROM gpu_rollup('batch_gpu', 3600000, 9223372036854775807)
