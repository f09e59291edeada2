-- Kept money of [$start, $end) compacted (store/lake_maintain.py): only each GPU-hour's
-- latest kept rows count (sql/lake/views.sql), so the earlier ones go. Bills read the same rows.
DELETE FROM lake.main.kept_slice_hour k
WHERE k.hour >= $start::TIMESTAMP AND k.hour < $end::TIMESTAMP
  AND k.snapshot_id < (SELECT max(v.snapshot_id) FROM lake.main.kept_gpu_hour v
                       WHERE v.hour = k.hour AND v.gpu_uuid = k.gpu_uuid);
DELETE FROM lake.main.kept_gpu_hour k
WHERE k.hour >= $start::TIMESTAMP AND k.hour < $end::TIMESTAMP
  AND k.snapshot_id < (SELECT max(v.snapshot_id) FROM lake.main.kept_gpu_hour v
                       WHERE v.hour = k.hour AND v.gpu_uuid = k.gpu_uuid);
