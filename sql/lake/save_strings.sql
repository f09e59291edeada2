-- New string ids of a batch without rows (dead letters only, a rejected message).
INSERT INTO lake.main.ingest_strings SELECT id, value FROM batch_strings;
