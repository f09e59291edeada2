-- A batch's slice rows, when with the rows held back they fill whole row groups
-- (sql/schema/003_raw_slice_tail.sql). Inputs: batch_slice_head, the held-back rows and
-- the batch's first rows, as many as whole row groups take; batch_slice_rest, the others.
-- Run by ingest/writer.py inside the batch's transaction.
INSERT INTO raw_slice_rows BY NAME SELECT * FROM batch_slice_head;
DELETE FROM raw_slice_tail;
INSERT INTO raw_slice_tail BY NAME SELECT * FROM batch_slice_rest;
