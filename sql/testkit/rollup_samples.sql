-- Samples counted in the hour rollups (a reader file holds the rollups, not the raw rows).
SELECT (SELECT coalesce(sum(sample_count), 0) FROM gpu_hour) + (SELECT coalesce(sum(sample_count), 0) FROM slice_hour)
    AS samples;
