-- Fold a lake's hour-rollup deltas of [$start, $end) (store/lake_maintain.py): each GPU-hour
-- and slice-hour with more than one delta row gets one row, their merge (gpu_partials_merged /
-- slice_partials_merged, sql/views/011_ingest.sql: sums, mins, maxes and latest values, so a
-- merged row merges with later deltas exactly as its parts would), and loses its parts; the
-- GPU inventory keeps each GPU's latest row. Readers (sql/lake/views.sql) merge on read as
-- before: the hours they show do not change, only how many rows make them.
CREATE OR REPLACE TEMP TABLE lake_fold_gpu AS
SELECT hour AS bucket, * EXCLUDE (hour) FROM lake.main.gpu_hour_pending
WHERE hour >= $start::TIMESTAMP AND hour < $end::TIMESTAMP
QUALIFY count(*) OVER (PARTITION BY hour, gpu_uuid_id) > 1;
DELETE FROM lake.main.gpu_hour_pending p
WHERE p.hour >= $start::TIMESTAMP AND p.hour < $end::TIMESTAMP
  AND EXISTS (SELECT 1 FROM lake_fold_gpu f WHERE f.bucket = p.hour AND f.gpu_uuid_id = p.gpu_uuid_id);
INSERT INTO lake.main.gpu_hour_pending BY NAME
SELECT bucket AS hour, * EXCLUDE (bucket) FROM gpu_partials_merged('lake_fold_gpu');

CREATE OR REPLACE TEMP TABLE lake_fold_slice AS
SELECT hour AS bucket, * EXCLUDE (hour) FROM lake.main.slice_hour_pending
WHERE hour >= $start::TIMESTAMP AND hour < $end::TIMESTAMP
QUALIFY count(*) OVER (PARTITION BY hour, gpu_uuid_id, pod_uid_id, container_id) > 1;
DELETE FROM lake.main.slice_hour_pending p
WHERE p.hour >= $start::TIMESTAMP AND p.hour < $end::TIMESTAMP
  AND EXISTS (SELECT 1 FROM lake_fold_slice f WHERE f.bucket = p.hour AND f.gpu_uuid_id = p.gpu_uuid_id
                                                AND f.pod_uid_id = p.pod_uid_id AND f.container_id = p.container_id);
INSERT INTO lake.main.slice_hour_pending BY NAME
SELECT bucket AS hour, * EXCLUDE (bucket) FROM slice_partials_merged('lake_fold_slice');
DROP TABLE lake_fold_gpu;
DROP TABLE lake_fold_slice;
