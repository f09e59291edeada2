-- The partitions of a batch (batch_owners: topic, "partition", epoch, owner: the epochs its
-- worker took) whose latest owner row is not that worker's at that epoch: another worker
-- took them (sql/lake/take_partitions.sql); the batch must not be stored.
SELECT b."partition", o.owner, o.epoch
FROM batch_owners b LEFT JOIN ingest_partition_owner o ON o.topic = b.topic AND o."partition" = b."partition"
WHERE o.epoch IS DISTINCT FROM b.epoch OR o.owner IS DISTINCT FROM b.owner
ORDER BY b."partition";
