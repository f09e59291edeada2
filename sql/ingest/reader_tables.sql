-- The store's tables, whether the reader file (store/reader_file.py) gets their rows, and
-- whether a refresh copies only the hours that changed.
-- Readers (dashboard, exports, right-sizing) read the hour rollups, the catalogs, the closed
-- and frozen months, the GPU inventory and the strings it names, offsets and dead letters.
-- The tables that grow with the raw retention or the minute history stay empty there:
-- raw samples, the held-back slice rows, the minute partials and the instants ingest checks
-- for duplicates; the pending rollup deltas are empty anyway at a refresh (it follows a
-- fold), and the change log is ingest's own. Every table is created there, so the TEMP views
-- of sql/views/ bind on the reader file as on the live one. A table added later is copied
-- with its rows unless it is named here.
-- by_hour: the tables that grow with the months held, keyed by an `hour` column, whose every
-- writer names the hours it changed in reader_changes (sql/schema/080_reader_changes.sql);
-- a refresh replaces those hours only. by_day: the readers' day figures ($day_tables:
-- store.READER_DAY_FIGURES), not copied but computed in the file from the store's
-- hours, for the days of the hours a refresh copies. Every other table is copied whole
-- (small ones).
SELECT table_name,
       table_name NOT IN ('raw_gpu_rows', 'raw_slice_rows', 'raw_slice_tail',
                          'gpu_minute_part', 'slice_minute_part', 'ingest_instants',
                          'gpu_hour_pending', 'slice_hour_pending', 'gpu_inventory_pending',
                          'reader_changes', 'reader_state')
       AND NOT list_contains($day_tables, table_name) AS with_rows,
       table_name IN ('gpu_hour', 'slice_hour', 'kept_gpu_hour', 'kept_slice_hour',
                      'frozen_gpu_hour', 'frozen_slice_hour', 'frozen_slice_unverified',
                      'frozen_slice_dra', 'frozen_gpu_driver', 'frozen_gpu_health') AS by_hour,
       list_contains($day_tables, table_name) AS by_day
FROM duckdb_tables()
WHERE database_name = current_database() AND schema_name = 'main' AND NOT temporary
ORDER BY table_name;
