-- A worker takes the partitions in `taken` ("partition") of $topic (ingest/consumer.py, on
-- assignment): each at one epoch above its last, the rows before deleted, and the fence
-- row (topic '') deleted and put back. DuckLake fails a commit that deleted from a table
-- another commit since its snapshot deleted from (the same rows) or inserted into
-- (docs/upstream.md): so this commit fails beside another take-over and beside any batch
-- (sql/lake/save_owners.sql), and a batch begun before it fails at its own commit.
CREATE OR REPLACE TEMP TABLE taken_epochs AS
SELECT t."partition", coalesce(max(o.epoch), 0) + 1 AS epoch
FROM taken t LEFT JOIN lake.main.ingest_partition_owners o ON o.topic = $topic AND o."partition" = t."partition"
GROUP BY t."partition";
DELETE FROM lake.main.ingest_partition_owners
WHERE topic = '' OR (topic = $topic AND "partition" IN (SELECT "partition" FROM taken));
INSERT INTO lake.main.ingest_partition_owners (topic, "partition", epoch, owner, taken_at)
SELECT $topic, "partition", epoch, $owner, now() FROM taken_epochs;
INSERT INTO lake.main.ingest_partition_owners (topic, "partition", epoch, owner, taken_at) VALUES ('', -1, 0, '', now());
