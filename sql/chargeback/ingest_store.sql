-- Whether the connected file is a store that migrations made (ingest's own), not a copy of
-- one: schema_migrations with its primary key. The readers' file copies every table with
-- CREATE TABLE AS (store/reader_file.py), which keeps no constraint; any other DuckDB file
-- has no schema_migrations.
SELECT count(*) > 0
FROM duckdb_constraints()
WHERE database_name = current_database() AND schema_name = 'main'
  AND table_name = 'schema_migrations' AND constraint_type = 'PRIMARY KEY';
