-- What the dashboard's month pages and right-sizing read: day figures per GPU and per slice,
-- and figures per cluster-hour, over [d_start, d_end) in whole days
-- (sql/views/305_day_figures.sql). Here computed from the hours; on a readers' file, which
-- keeps them (store/reader_file.py), store.apply_views redefines gpu_days, slice_days,
-- cluster_hours and slice_sizing_parts to read its tables (sql/views/reader_days.sql), and
-- the pages' SQL stays the same.

CREATE OR REPLACE TEMP MACRO gpu_days(d_start, d_end) AS TABLE
SELECT * FROM gpu_days_of_hours(d_start, d_end);

CREATE OR REPLACE TEMP MACRO slice_days(d_start, d_end) AS TABLE
SELECT * FROM slice_days_of_hours(d_start, d_end);

CREATE OR REPLACE TEMP MACRO cluster_hours(d_start, d_end) AS TABLE
SELECT * FROM cluster_hours_of_hours(d_start, d_end);

-- Right-sizing's figures per slice (sql/rightsizing/slices.sql), here in one part over the
-- window: merging days would only cost more.
CREATE OR REPLACE TEMP MACRO slice_sizing_parts(d_start, d_end) AS TABLE
SELECT * FROM slice_sizing_of_hours(d_start, d_end, false);

-- The tenant of each, by the attribution of sql/views/010_attribution.sql: a GPU and a
-- cluster-hour its cluster's, a slice its namespace override's, else its cluster's.
CREATE OR REPLACE TEMP MACRO gpu_days_tenant(d_start, d_end) AS TABLE
SELECT coalesce(ct.tenant, 'unassigned') AS tenant, g.*
FROM gpu_days(d_start, d_end) g
LEFT JOIN cluster_tenant ct ON ct.cluster = g.cluster;

CREATE OR REPLACE TEMP MACRO cluster_hours_tenant(d_start, d_end) AS TABLE
SELECT coalesce(ct.tenant, 'unassigned') AS tenant, c.*
FROM cluster_hours(d_start, d_end) c
LEFT JOIN cluster_tenant ct ON ct.cluster = c.cluster;

CREATE OR REPLACE TEMP MACRO slice_days_tenant(d_start, d_end) AS TABLE
SELECT coalesce(o.tenant, ct.tenant, 'unassigned') AS tenant, s.*
FROM slice_days(d_start, d_end) s
LEFT JOIN cluster_namespace_override o ON o.cluster = s.cluster AND o.namespace = s.namespace
LEFT JOIN cluster_tenant ct ON ct.cluster = s.cluster;

-- The hours with any GPU metered (the months a reader can pick and how much of each is covered).
CREATE OR REPLACE TEMP MACRO metered_hours() AS TABLE
SELECT DISTINCT hour FROM gpu_hour;
