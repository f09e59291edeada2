-- On a readers' file: the day figures it keeps (sql/schema/090_reader_days.sql) in place of
-- computing them from the hours (sql/views/310_days.sql). Applied by store.apply_views
-- after the numbered views, on a file that holds a refresh (reader_file_state).

CREATE OR REPLACE TEMP MACRO gpu_days(d_start, d_end) AS TABLE
SELECT * FROM reader_gpu_day WHERE day >= d_start AND day < d_end;

CREATE OR REPLACE TEMP MACRO slice_days(d_start, d_end) AS TABLE
SELECT * FROM reader_slice_day WHERE day >= d_start AND day < d_end;

CREATE OR REPLACE TEMP MACRO cluster_hours(d_start, d_end) AS TABLE
SELECT * FROM reader_cluster_hour WHERE hour >= d_start AND hour < d_end;

CREATE OR REPLACE TEMP MACRO slice_sizing_parts(d_start, d_end) AS TABLE
SELECT * FROM reader_slice_sizing_day WHERE day >= d_start AND day < d_end;

-- The bill's kept money (sql/views/101_kept_money.sql) from its per-day sums.
CREATE OR REPLACE TEMP MACRO kept_slice_sums(m_start, m_end, share_kind, basis) AS TABLE
SELECT model_hour, gpu_uuid, p_cluster, p_node, p_model, cluster, namespace, pod, pod_uid, container,
       sum(kept_pick(share_kind, a_dom, a_mem, a_cores))::HUGEINT AS alloc_u, sum(u)::HUGEINT AS used_u,
       sum(kept_billed(share_kind, basis, a_dom, a_mem, a_cores, u, m_dom, m_mem, m_cores))::HUGEINT AS billed_u,
       sum(kept_pick(share_kind, w_dom, w_mem, w_cores))::HUGEINT AS waste_u,
       sum(kept_pick(share_kind, e_dom, e_mem, e_cores))::HUGEINT AS energy_mj, sum(n)::BIGINT AS n
FROM reader_kept_slice_day WHERE day >= m_start AND day < m_end
GROUP BY ALL;

-- The health events (sql/views/012_health.sql) and the slice-hours on them.
CREATE OR REPLACE TEMP MACRO gpu_health_noted(h_start, h_end) AS TABLE
SELECT * FROM reader_health_event WHERE hour >= h_start::TIMESTAMP AND hour < h_end::TIMESTAMP;

CREATE OR REPLACE TEMP MACRO slices_on_noted(h_start, h_end) AS TABLE
SELECT * FROM reader_health_event_slice WHERE hour >= h_start::TIMESTAMP AND hour < h_end::TIMESTAMP;

-- The month's placements (sql/views/101_kept_money.sql), from the kept GPU-days.
CREATE OR REPLACE TEMP MACRO kept_placements(m_start, m_end) AS TABLE
SELECT DISTINCT cluster, node, gpu_uuid, model FROM reader_kept_gpu_day WHERE day >= m_start AND day < m_end;

-- Whether the month can be billed from the kept days alone: every kept GPU-hour has a model
-- (one without has it looked up across hours, which needs the hours).
CREATE OR REPLACE TEMP MACRO kept_days_billable(m_start, m_end) AS
NOT EXISTS (SELECT 1 FROM reader_kept_gpu_day WHERE day >= m_start AND day < m_end AND model IS NULL);

-- cb_gpu_agg()'s rows from the kept GPU-days (prices from cb_price, the month's placements in
-- cb_place_t, the slices' energy from cb_detail_t): every figure of a placement is a sum over
-- its GPU-hours, each already rounded as the bill rounds it. No GPU-hour is overpaid: a slice
-- total within the capacity bills itself, one above it bills its scaled shares (floored, so
-- never above the capacity), and prices are not negative.
CREATE OR REPLACE TEMP MACRO kept_gpu_agg_days(m_start, m_end, share_kind, basis) AS TABLE
WITH d AS (
    SELECT cluster, node, gpu_uuid, model, sum(hours) AS gpu_hours_seen, min(first_hour) AS first_hour,
           max(last_hour) AS last_hour, sum(cap_u)::HUGEINT AS metered_u, sum(energy_mj)::HUGEINT AS energy_mj,
           sum(kept_billed(share_kind, basis, b_alloc_dom, b_alloc_mem, b_alloc_cores, b_usage,
                           b_max_dom, b_max_mem, b_max_cores))::HUGEINT AS billed_u
    FROM reader_kept_gpu_day WHERE day >= m_start AND day < m_end
    GROUP BY ALL
), g AS (
    SELECT p.pid, p.cluster, p.node, p.gpu_uuid, p.model, pr.price_micro, d.metered_u,
           (pr.price_micro::HUGEINT * d.metered_u)::HUGEINT AS cost_raw,
           (pr.price_micro::HUGEINT * d.billed_u)::HUGEINT AS charged_raw,
           (pr.price_micro::HUGEINT * (d.metered_u - d.billed_u))::HUGEINT AS idle_raw,
           (d.metered_u - d.billed_u)::HUGEINT AS idle_u, d.energy_mj, d.gpu_hours_seen, d.first_hour, d.last_hour,
           0::BIGINT AS overpaid_hours
    FROM d
    JOIN cb_place_t p ON p.cluster = d.cluster AND p.node = d.node AND p.gpu_uuid = d.gpu_uuid AND p.model = d.model
    JOIN cb_price pr ON pr.cluster = p.cluster AND pr.node = p.node AND pr.model IS NOT DISTINCT FROM p.model
), e AS (
    SELECT cluster, node, gpu_uuid, model, sum(energy_mj)::HUGEINT AS energy_mj_slices
    FROM cb_detail_t GROUP BY ALL
)
SELECT g.cluster, g.node, g.gpu_uuid, coalesce(g.model, '') AS model, g.* EXCLUDE (pid, cluster, node, gpu_uuid, model),
       greatest(g.energy_mj - coalesce(e.energy_mj_slices, 0), 0)::HUGEINT AS idle_energy_mj
FROM g
LEFT JOIN e ON e.cluster = g.cluster AND e.node = g.node AND e.gpu_uuid = g.gpu_uuid AND e.model = coalesce(g.model, '')
ORDER BY g.cluster, g.node, g.gpu_uuid, model;

-- sql/chargeback/slice_line_notes.sql's rows (live months) from the kept slice-days.
CREATE OR REPLACE TEMP MACRO kept_notes_days(m_start, m_end) AS TABLE
WITH k AS (
    SELECT coalesce(o.tenant, ct.tenant, 'unassigned') AS tenant, k.*
    FROM reader_kept_slice_day k
    LEFT JOIN cluster_namespace_override o ON o.cluster = k.cluster AND o.namespace = k.namespace
    LEFT JOIN cluster_tenant ct ON ct.cluster = k.cluster
    WHERE k.day >= m_start AND k.day < m_end
      AND (k.unverified_u IS NOT NULL OR k.claim IS NOT NULL OR k.driver IS NOT NULL)
)
SELECT tenant, coalesce(namespace, '') AS namespace, coalesce(pod, '') AS pod, pod_uid, container,
       p_cluster AS cluster, p_node AS node, gpu_uuid, coalesce(p_model, '') AS model,
       sum(unverified_u)::BIGINT AS unverified_u, sum(unknown_u)::BIGINT AS unknown_u,
       coalesce(arg_max(claim, claim_hour), '') AS claim, coalesce(arg_max(driver, driver_hour), '') AS driver
FROM k
GROUP BY ALL;

-- sql/chargeback/dra_gpu_drivers.sql's rows (live months) from the kept GPU-days.
CREATE OR REPLACE TEMP MACRO kept_drivers_days(m_start, m_end) AS TABLE
SELECT cluster, node, gpu_uuid, coalesce(model, '') AS model, arg_max(driver, driver_hour) AS driver
FROM reader_kept_gpu_day
WHERE day >= m_start AND day < m_end AND driver IS NOT NULL
GROUP BY ALL;

CREATE OR REPLACE TEMP MACRO metered_hours() AS TABLE
SELECT DISTINCT hour FROM reader_cluster_hour;

-- The cluster strings of the rollups, from the day figures (the same clusters as the hours').
CREATE OR REPLACE TEMP MACRO stored_clusters() AS TABLE
SELECT cluster FROM reader_slice_day UNION SELECT cluster FROM reader_gpu_day;
