-- The store's tables and whether the reader file (store/reader_file.py) gets their rows.
-- Readers (dashboard, exports, right-sizing) read the hour rollups, the catalogs, the closed
-- and frozen months, the GPU inventory and the strings it names, offsets and dead letters.
-- The tables that grow with the raw retention or the minute history stay empty there:
-- raw samples, the held-back slice rows and the minute partials; the pending rollup deltas
-- are empty anyway at a refresh (it follows a fold). Every table is created there, so the
-- TEMP views of sql/views/ bind on the reader file as on the live one. A table added later
-- is copied with its rows unless it is named here.
SELECT table_name,
       table_name NOT IN ('raw_gpu_rows', 'raw_slice_rows', 'raw_slice_tail',
                          'gpu_minute_part', 'slice_minute_part',
                          'gpu_hour_pending', 'slice_hour_pending', 'gpu_inventory_pending') AS with_rows
FROM duckdb_tables()
WHERE database_name = current_database() AND schema_name = 'main' AND NOT temporary
ORDER BY table_name;
