-- On a readers' file: the day figures it keeps (sql/schema/090_reader_days.sql) in place of
-- computing them from the hours (sql/views/310_days.sql). Applied by store.apply_views
-- after the numbered views, on a file that holds a refresh (reader_file_state).

CREATE OR REPLACE TEMP MACRO gpu_days(d_start, d_end) AS TABLE
SELECT * FROM reader_gpu_day WHERE day >= d_start AND day < d_end;

CREATE OR REPLACE TEMP MACRO slice_days(d_start, d_end) AS TABLE
SELECT * FROM reader_slice_day WHERE day >= d_start AND day < d_end;

CREATE OR REPLACE TEMP MACRO cluster_hours(d_start, d_end) AS TABLE
SELECT * FROM reader_cluster_hour WHERE hour >= d_start AND hour < d_end;

-- The bill's kept money (sql/views/101_kept_money.sql) from its per-day sums.
CREATE OR REPLACE TEMP MACRO kept_slice_sums(m_start, m_end, share_kind, basis) AS TABLE
SELECT model_hour, gpu_uuid, p_cluster, p_node, p_model, cluster, namespace, pod, pod_uid, container,
       sum(kept_pick(share_kind, a_dom, a_mem, a_cores))::HUGEINT AS alloc_u, sum(u)::HUGEINT AS used_u,
       sum(CASE basis WHEN 'usage' THEN u WHEN 'max' THEN kept_pick(share_kind, m_dom, m_mem, m_cores)
                      ELSE kept_pick(share_kind, a_dom, a_mem, a_cores) END)::HUGEINT AS billed_u,
       sum(kept_pick(share_kind, w_dom, w_mem, w_cores))::HUGEINT AS waste_u,
       sum(kept_pick(share_kind, e_dom, e_mem, e_cores))::HUGEINT AS energy_mj, sum(n)::BIGINT AS n
FROM reader_kept_slice_day WHERE day >= m_start AND day < m_end
GROUP BY ALL;

-- The health events (sql/views/012_health.sql) and the slice-hours on them.
CREATE OR REPLACE TEMP MACRO gpu_health_noted(h_start, h_end) AS TABLE
SELECT * FROM reader_health_event WHERE hour >= h_start::TIMESTAMP AND hour < h_end::TIMESTAMP;

CREATE OR REPLACE TEMP MACRO slices_on_noted(h_start, h_end) AS TABLE
SELECT * FROM reader_health_event_slice WHERE hour >= h_start::TIMESTAMP AND hour < h_end::TIMESTAMP;

CREATE OR REPLACE TEMP MACRO metered_hours() AS TABLE
SELECT DISTINCT hour FROM reader_cluster_hour;

-- Every cluster string the file knows, from the day figures (the same clusters as the hours').
CREATE OR REPLACE TEMP VIEW known_cluster AS
SELECT cluster, cluster_key(cluster) AS cluster_key FROM (
    SELECT cluster FROM reader_slice_day UNION SELECT cluster FROM reader_gpu_day
    UNION SELECT identity FROM tenant_identity UNION SELECT cluster FROM tenant_namespace_overrides
);
