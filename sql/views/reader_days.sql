-- On a readers' file: the day figures it keeps (sql/schema/090_reader_days.sql) in place of
-- computing them from the hours (sql/views/310_days.sql). Applied by store.apply_views
-- after the numbered views, on a file that holds a refresh (reader_file_state).

CREATE OR REPLACE TEMP MACRO gpu_days(d_start, d_end) AS TABLE
SELECT * FROM reader_gpu_day WHERE day >= d_start AND day < d_end;

CREATE OR REPLACE TEMP MACRO slice_days(d_start, d_end) AS TABLE
SELECT * FROM reader_slice_day WHERE day >= d_start AND day < d_end;

CREATE OR REPLACE TEMP MACRO cluster_hours(d_start, d_end) AS TABLE
SELECT * FROM reader_cluster_hour WHERE hour >= d_start AND hour < d_end;

CREATE OR REPLACE TEMP MACRO metered_hours() AS TABLE
SELECT DISTINCT hour FROM reader_cluster_hour;

-- Every cluster string the file knows, from the day figures (the same clusters as the hours').
CREATE OR REPLACE TEMP VIEW known_cluster AS
SELECT cluster, cluster_key(cluster) AS cluster_key FROM (
    SELECT cluster FROM reader_slice_day UNION SELECT cluster FROM reader_gpu_day
    UNION SELECT identity FROM tenant_identity UNION SELECT cluster FROM tenant_namespace_overrides
);
