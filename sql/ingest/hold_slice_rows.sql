-- The slice rows of a batch that do not fill a whole row group wait for the next batch
-- (sql/schema/003_raw_slice_tail.sql). Input: batch_slice_rest.
INSERT INTO raw_slice_tail BY NAME SELECT * FROM batch_slice_rest;
