-- What changed since each state of the readers' file (store/reader_file.py), so a refresh
-- copies the hours that changed instead of every table whole. Every statement that writes
-- an hour-keyed table the reader file copies (sql/ingest/reader_tables.sql, by_hour) names
-- the hours it changed here, in its own transaction: the fold and keeping money
-- (sql/ingest/keep_money.sql), a month's close (sql/chargeback/freeze.sql). A NULL hour
-- says anything may have changed (a migration, the kept tables emptied): the next refresh
-- of each file copies everything.
-- `refresh` is NULL until a refresh stamps the rows it has seen with its number
-- (reader_state.refresh); a file holding refresh F then needs the hours of the rows after
-- F or not yet stamped. Rows every file has seen are deleted (reader_state.pruned: up to
-- which refresh). Unstamped rows are written once per hour, so the table stays small
-- even with no reader file kept.
CREATE TABLE IF NOT EXISTS reader_changes (
    hour    TIMESTAMP,
    refresh BIGINT
);

CREATE TABLE IF NOT EXISTS reader_state (
    store_id VARCHAR NOT NULL,   -- tells this store's reader files from another store's
    refresh  BIGINT  NOT NULL,   -- the last refresh number handed out
    pruned   BIGINT  NOT NULL    -- reader_changes rows stamped up to here are deleted
);
INSERT INTO reader_state SELECT gen_random_uuid()::VARCHAR, 0, 0 WHERE NOT EXISTS (FROM reader_state);
