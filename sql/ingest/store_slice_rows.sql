-- A batch's slice rows that, with the rows held back, fill whole row groups
-- (sql/schema/003_raw_slice_tail.sql). Input: batch_slice_head, the held-back rows and the
-- batch's first rows, as many as whole row groups take. The batch's other rows are held
-- back next (sql/ingest/hold_slice_rows.sql). Run by ingest/writer.py inside the batch's
-- transaction.
INSERT INTO raw_slice_rows BY NAME SELECT * FROM batch_slice_head;
DELETE FROM raw_slice_tail;
