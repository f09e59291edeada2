-- Slice rows held back until they fill a whole DuckDB row group (122,880 rows).
-- DuckDB writes a big insert's row groups straight to the file, a trailing partial one
-- included; the next checkpoint then finds partial row groups scattered through
-- raw_slice_rows, merges them, and so decompresses and compresses again every row
-- appended since the last checkpoint (measured here: +0.4 us per slice row, about a
-- quarter of the writer's time). So raw_slice_rows only ever takes whole row groups: each batch
-- stores the rows held back here plus its own first rows as whole row groups, and holds
-- its remainder back here (sql/ingest/store_slice_rows.sql), in the same transaction.
-- Readers see both tables through the TEMP view raw_slice_stored (sql/views/011_ingest.sql).
CREATE TABLE IF NOT EXISTS raw_slice_tail AS SELECT * FROM raw_slice_rows LIMIT 0;
