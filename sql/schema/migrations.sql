-- The migration runner's own tables (store/schema.py), created before any numbered
-- migration: which migrations a store holds, and which release applied them.
-- schema_migrations: one row per sql/schema/NNN_*.sql applied.
CREATE TABLE IF NOT EXISTS schema_migrations (name VARCHAR PRIMARY KEY, applied_at TIMESTAMP DEFAULT now());
-- schema_releases: one row per run that changed the schema, in the same transaction as its
-- migrations: the release (slicemeter.__version__), the migrations it applied and how many
-- the store held after. A store migrated before the table existed gets one row for those,
-- release 'unrecorded'.
CREATE TABLE IF NOT EXISTS schema_releases (
    release     VARCHAR NOT NULL,
    applied     VARCHAR[] NOT NULL,
    holds       INTEGER NOT NULL,
    migrated_at TIMESTAMP NOT NULL DEFAULT now()
);
