-- One batch's slice rows aggregated per slice-hour (slice_rollup: sql/views/011_ingest.sql):
-- the deltas the writer adds into slice_hour. Inputs: batch_slice, and known_inventory
-- (every known GPU, this batch's merged in: the memory sizes shares are fractions of).
SELECT bucket AS hour, * EXCLUDE (bucket) REPLACE (least(3600, metered_s) AS metered_s)
FROM slice_rollup('batch_slice', 'known_inventory', 3600000, 9223372036854775807)
