-- The append-only bookkeeping compacted (store/lake_maintain.py): each partition's latest
-- offset and owner rows and each GPU's latest inventory row are the ones read
-- (sql/lake/views.sql); the rows before them go. The fence row (topic '') stays.
DELETE FROM lake.main.ingest_offsets o
WHERE o.snapshot_id < (SELECT max(l.snapshot_id) FROM lake.main.ingest_offsets l
                       WHERE l.topic = o.topic AND l."partition" = o."partition");
DELETE FROM lake.main.ingest_partition_owners o
WHERE o.topic <> '' AND (o.epoch, o.snapshot_id) < (SELECT max((l.epoch, l.snapshot_id)) FROM lake.main.ingest_partition_owners l
                                                     WHERE l.topic = o.topic AND l."partition" = o."partition");
DELETE FROM lake.main.gpu_inventory_pending i
WHERE (i.last_seen_ms, -i.first_seen_ms) < (SELECT max((l.last_seen_ms, -l.first_seen_ms)) FROM lake.main.gpu_inventory_pending l
                                            WHERE l.gpu_uuid_id = i.gpu_uuid_id);
