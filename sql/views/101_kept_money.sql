-- Money kept per hour (tables: sql/schema/060_kept_money.sql; docs/live-bill.md, Kept money).
-- Keeping: sql/ingest/keep_money.sql recomputes the GPU-hours named in kept_touched_t from
-- the hour rollups with the bill's own integer steps (sql/views/100_chargeback.sql), for
-- every share kind and basis at once. Billing: chargeback/bill.py reads the kept rows of a
-- month into the bill's working tables (cb_gpu_id_t, cb_place_t, cb_hour_t, cb_calc_sum_t,
-- cb_hour_charge_t) in place of the passes over the month's slice-hours; everything after
-- them (prices, the invariant, idle, rounding, the unmetered report) is the same code.

-- The GPU-hours to keep again (a fold's, or a range's), and their GPU-level figures while
-- their slice-hours are kept.
CREATE TEMP TABLE IF NOT EXISTS kept_touched_t (hour TIMESTAMP, gpu_uuid VARCHAR);
CREATE TEMP TABLE IF NOT EXISTS kept_hour_t (
    hour TIMESTAMP, gpu_uuid VARCHAR, cluster VARCHAR, node VARCHAR, model VARCHAR, has_gpu_row BOOLEAN,
    gpu_metered_s DOUBLE, metered_s DOUBLE, energy_joules DOUBLE, cap_u BIGINT, energy_mj BIGINT,
    a_dom_tot BIGINT, a_mem_tot BIGINT, a_cores_tot BIGINT, u_tot BIGINT,
    m_dom_tot BIGINT, m_mem_tot BIGINT, m_cores_tot BIGINT, slice_rows BIGINT,
    src_rows BIGINT, src_samples BIGINT, src_latest_ms BIGINT
);

-- The keeping macros read the hour rollups from the tables they are named (gpu_src,
-- slice_src: gpu_hour and slice_hour, or a lake's touched GPU-hours merged,
-- sql/lake/keep_money.sql).
-- The touched GPU-hours' slice-hours with their shares as integer micro-GPU-seconds.
CREATE OR REPLACE TEMP MACRO kept_slice_shares(slice_src) AS TABLE
SELECT s.hour, s.gpu_uuid, s.pod_uid, s.container, s.cluster, s.node, s.namespace, s.pod, s.metered_s,
       s.sample_count, coalesce(s.latest_ts_ms, 0) AS latest_ms,
       cb_micro(s.alloc_dominant_share_s) AS a_dom, cb_micro(s.alloc_mem_share_s) AS a_mem,
       cb_micro(s.alloc_cores_share_s) AS a_cores, cb_micro(s.usage_share_s) AS u
FROM query_table(slice_src) s SEMI JOIN kept_touched_t t ON t.hour = s.hour AND t.gpu_uuid = s.gpu_uuid;

-- The touched GPU-hours (cb_hours_placed's definition): metered time, placement (the GPU
-- row's, else the longest slice's: cb_slice_placement), the share totals of every kind.
CREATE OR REPLACE TEMP MACRO kept_hours_of_touched(gpu_src, slice_src) AS TABLE
WITH g AS (
    SELECT g.hour, g.gpu_uuid, g.cluster, g.node, g.model, g.metered_s, g.energy_joules, g.sample_count,
           coalesce(g.latest_ts_ms, 0) AS latest_ms
    FROM query_table(gpu_src) g SEMI JOIN kept_touched_t t ON t.hour = g.hour AND t.gpu_uuid = g.gpu_uuid
), s AS (
    SELECT hour, gpu_uuid, max(least(greatest(metered_s, 0), 3600.0)) AS slice_metered_s,
           min(struct_pack(neg_s := -metered_s, c := cluster, n := node)) AS place,
           sum(a_dom)::BIGINT AS a_dom_tot, sum(a_mem)::BIGINT AS a_mem_tot, sum(a_cores)::BIGINT AS a_cores_tot,
           sum(u)::BIGINT AS u_tot, sum(greatest(a_dom, u))::BIGINT AS m_dom_tot,
           sum(greatest(a_mem, u))::BIGINT AS m_mem_tot, sum(greatest(a_cores, u))::BIGINT AS m_cores_tot,
           count(*) AS slice_rows, sum(sample_count)::BIGINT AS samples, sum(latest_ms)::BIGINT AS latest_ms
    FROM kept_slice_shares(slice_src) GROUP BY hour, gpu_uuid
), h AS (
    SELECT coalesce(g.hour, s.hour) AS hour, coalesce(g.gpu_uuid, s.gpu_uuid) AS gpu_uuid,
           coalesce(g.cluster, s.place.c) AS cluster, coalesce(g.node, s.place.n) AS node, g.model,
           g.hour IS NOT NULL AS has_gpu_row,
           coalesce(least(greatest(g.metered_s, 0), 3600.0), 0) AS gpu_metered_s,
           greatest(coalesce(least(greatest(g.metered_s, 0), 3600.0), 0), coalesce(s.slice_metered_s, 0)) AS metered_s,
           g.energy_joules,
           coalesce(s.a_dom_tot, 0) AS a_dom_tot, coalesce(s.a_mem_tot, 0) AS a_mem_tot,
           coalesce(s.a_cores_tot, 0) AS a_cores_tot, coalesce(s.u_tot, 0) AS u_tot,
           coalesce(s.m_dom_tot, 0) AS m_dom_tot, coalesce(s.m_mem_tot, 0) AS m_mem_tot,
           coalesce(s.m_cores_tot, 0) AS m_cores_tot, coalesce(s.slice_rows, 0) AS slice_rows,
           (g.hour IS NOT NULL)::BIGINT AS src_rows, coalesce(g.sample_count, 0) AS src_samples,
           coalesce(g.latest_ms, 0) AS src_latest_ms
    FROM g FULL OUTER JOIN s ON g.hour = s.hour AND g.gpu_uuid = s.gpu_uuid
)
SELECT *, cb_cap_u(metered_s) AS cap_u, cb_energy_mj(energy_joules) AS energy_mj FROM h;

-- The touched slice-hours scaled on their GPU-hour (kept_hour_t), every share kind and basis.
CREATE OR REPLACE TEMP MACRO kept_slices_of_touched(slice_src) AS TABLE
WITH x AS (
    SELECT s.*, h.cluster AS p_cluster, h.node AS p_node, h.model AS p_model, h.cap_u, h.energy_mj,
           cb_scaled(s.a_dom, h.a_dom_tot, h.cap_u) AS a_dom_u, cb_scaled(s.a_mem, h.a_mem_tot, h.cap_u) AS a_mem_u,
           cb_scaled(s.a_cores, h.a_cores_tot, h.cap_u) AS a_cores_u, cb_scaled(s.u, h.u_tot, h.cap_u) AS u_u,
           cb_scaled(greatest(s.a_dom, s.u), h.m_dom_tot, h.cap_u) AS m_dom_u,
           cb_scaled(greatest(s.a_mem, s.u), h.m_mem_tot, h.cap_u) AS m_mem_u,
           cb_scaled(greatest(s.a_cores, s.u), h.m_cores_tot, h.cap_u) AS m_cores_u,
           cb_busy(h.u_tot, h.cap_u) AS busy
    FROM kept_slice_shares(slice_src) s JOIN kept_hour_t h ON h.hour = s.hour AND h.gpu_uuid = s.gpu_uuid
)
SELECT hour, gpu_uuid, pod_uid, container, cluster, namespace, pod, p_cluster, p_node, p_model,
       a_dom_u AS a_dom, a_mem_u AS a_mem, a_cores_u AS a_cores, u_u AS u, m_dom_u AS m_dom, m_mem_u AS m_mem,
       m_cores_u AS m_cores,
       cb_slice_energy(energy_mj, u_u, a_dom_u, cap_u, busy) AS e_dom,
       cb_slice_energy(energy_mj, u_u, a_mem_u, cap_u, busy) AS e_mem,
       cb_slice_energy(energy_mj, u_u, a_cores_u, cap_u, busy) AS e_cores,
       sample_count AS src_samples, latest_ms AS src_latest_ms
FROM x;

-- The kept GPU-hours of the touched set: kept_hour_t with the sums of their slices' scaled
-- shares (read from `kept_slices`, where the touched GPU-hours' kept slice-hours are).
CREATE OR REPLACE TEMP MACRO kept_gpu_rows_of_touched(kept_slices) AS TABLE
WITH sc AS (
    SELECT k.hour, k.gpu_uuid, sum(a_dom)::BIGINT AS sc_a_dom, sum(a_mem)::BIGINT AS sc_a_mem,
           sum(a_cores)::BIGINT AS sc_a_cores, sum(u)::BIGINT AS sc_u, sum(m_dom)::BIGINT AS sc_m_dom,
           sum(m_mem)::BIGINT AS sc_m_mem, sum(m_cores)::BIGINT AS sc_m_cores
    FROM query_table(kept_slices) k SEMI JOIN kept_touched_t t ON t.hour = k.hour AND t.gpu_uuid = k.gpu_uuid
    GROUP BY k.hour, k.gpu_uuid
)
SELECT h.* EXCLUDE (cap_u, energy_mj),
       coalesce(sc.sc_a_dom, 0) AS sc_a_dom, coalesce(sc.sc_a_mem, 0) AS sc_a_mem,
       coalesce(sc.sc_a_cores, 0) AS sc_a_cores, coalesce(sc.sc_u, 0) AS sc_u, coalesce(sc.sc_m_dom, 0) AS sc_m_dom,
       coalesce(sc.sc_m_mem, 0) AS sc_m_mem, coalesce(sc.sc_m_cores, 0) AS sc_m_cores
FROM kept_hour_t h LEFT JOIN sc ON sc.hour = h.hour AND sc.gpu_uuid = h.gpu_uuid;

-- Whether a month's kept hours are current: the rollups' row counts, samples and latest
-- samples against the copies the kept rows took of them (a fold re-keeps every GPU-hour it
-- changes, and folding a sample always adds to its row's sample count).
CREATE OR REPLACE TEMP MACRO kept_sources(m_start, m_end) AS TABLE
SELECT (SELECT (count(*), coalesce(sum(sample_count), 0), coalesce(sum(coalesce(latest_ts_ms, 0)), 0))
          FROM gpu_hour WHERE hour >= m_start AND hour < m_end) AS gpu_live,
       (SELECT (coalesce(sum(src_rows), 0), coalesce(sum(src_samples), 0), coalesce(sum(src_latest_ms), 0))
          FROM kept_gpu_hour WHERE hour >= m_start AND hour < m_end) AS gpu_kept,
       (SELECT (count(*), coalesce(sum(sample_count), 0), coalesce(sum(coalesce(latest_ts_ms, 0)), 0))
          FROM slice_hour WHERE hour >= m_start AND hour < m_end) AS slice_live,
       (SELECT (count(*), coalesce(sum(src_samples), 0), coalesce(sum(src_latest_ms), 0))
          FROM kept_slice_hour WHERE hour >= m_start AND hour < m_end) AS slice_kept;

-- A share kind's and basis's column of a kept row.
CREATE OR REPLACE TEMP MACRO kept_pick(share_kind, dom, mem, cores) AS
    CASE share_kind WHEN 'memory' THEN mem WHEN 'cores' THEN cores ELSE dom END;

-- What a basis bills of a kept row: usage, max(allocation, usage) or allocation, each in the
-- share kind's column. `usage_checked` is usage: a month with usage NVML could not check is
-- billed on that basis from the rollups (chargeback/bill.py month_lines).
CREATE OR REPLACE TEMP MACRO kept_billed(share_kind, basis, a_dom, a_mem, a_cores, u, m_dom, m_mem, m_cores) AS
    CASE basis WHEN 'usage' THEN u WHEN 'usage_checked' THEN u WHEN 'max' THEN kept_pick(share_kind, m_dom, m_mem, m_cores)
               ELSE kept_pick(share_kind, a_dom, a_mem, a_cores) END;

-- The month's GPUs and the placements its kept GPU-hours name (cb_gpu_ids, cb_gpu_places);
-- a readers' file reads the placements from its kept GPU-days (sql/views/reader_days.sql).
CREATE OR REPLACE TEMP MACRO kept_placements(m_start, m_end) AS TABLE
SELECT DISTINCT cluster, node, gpu_uuid, model FROM kept_gpu_hour WHERE hour >= m_start AND hour < m_end;

CREATE OR REPLACE TEMP MACRO kept_gpu_ids(m_start, m_end) AS TABLE
SELECT gpu_uuid, row_number() OVER (ORDER BY gpu_uuid)::INTEGER AS gid
FROM (SELECT DISTINCT gpu_uuid FROM kept_placements(m_start, m_end));

CREATE OR REPLACE TEMP MACRO kept_gpu_places(m_start, m_end) AS TABLE
SELECT row_number() OVER (ORDER BY x.cluster, x.node, x.gpu_uuid, x.model)::INTEGER AS pid,
       x.cluster, x.node, x.gpu_uuid, x.model, i.gid
FROM kept_placements(m_start, m_end) x
JOIN cb_gpu_id_t i USING (gpu_uuid);

-- cb_hour_t's rows from the kept GPU-hours (cb_hours_placed's, every one placed).
CREATE OR REPLACE TEMP MACRO kept_hours_placed(m_start, m_end, share_kind, basis) AS TABLE
SELECT k.hour, p.gid, p.pid, k.gpu_metered_s, k.metered_s, k.energy_joules, k.has_gpu_row,
       kept_pick(share_kind, k.a_dom_tot, k.a_mem_tot, k.a_cores_tot) AS a_tot, k.u_tot,
       kept_billed(share_kind, basis, k.a_dom_tot, k.a_mem_tot, k.a_cores_tot, k.u_tot,
                   k.m_dom_tot, k.m_mem_tot, k.m_cores_tot) AS b_tot
FROM kept_gpu_hour k
JOIN cb_place_t p ON p.cluster = k.cluster AND p.node = k.node AND p.gpu_uuid = k.gpu_uuid
                 AND p.model IS NOT DISTINCT FROM k.model
WHERE k.hour >= m_start AND k.hour < m_end;

-- The kept slice-hours of [m_start, m_end) summed per slice and placement for a share kind
-- and basis (a slice-hour whose GPU-hour's model is looked up keeps its hour, to find its
-- placement in cb_hour_t). A readers' file sums its per-day sums instead
-- (sql/views/reader_days.sql).
CREATE OR REPLACE TEMP MACRO kept_slice_sums(m_start, m_end, share_kind, basis) AS TABLE
SELECT CASE WHEN p_model IS NULL THEN hour END AS model_hour, gpu_uuid, p_cluster, p_node, p_model,
       cluster, namespace, pod, pod_uid, container,
       sum(kept_pick(share_kind, a_dom, a_mem, a_cores))::HUGEINT AS alloc_u, sum(u)::HUGEINT AS used_u,
       sum(kept_billed(share_kind, basis, a_dom, a_mem, a_cores, u, m_dom, m_mem, m_cores))::HUGEINT AS billed_u,
       sum(greatest(kept_pick(share_kind, a_dom, a_mem, a_cores) - u, 0))::HUGEINT AS waste_u,
       sum(kept_pick(share_kind, e_dom, e_mem, e_cores))::HUGEINT AS energy_mj, count(*)::BIGINT AS n
FROM kept_slice_hour WHERE hour >= m_start AND hour < m_end
GROUP BY ALL;

-- cb_calc_sum_t's rows from the kept slice-hours (kept_slice_sums), attributed to tenants as
-- slice_hour_tenant does, by cluster and namespace.
CREATE OR REPLACE TEMP MACRO kept_calc_sums(m_start, m_end, share_kind, basis) AS TABLE
WITH k AS (
    SELECT * FROM kept_slice_sums(m_start, m_end, share_kind, basis)
), named AS (
    SELECT k.*, p.pid FROM k JOIN cb_place_t p ON p.cluster = k.p_cluster AND p.node = k.p_node
                                              AND p.gpu_uuid = k.gpu_uuid AND p.model = k.p_model
    WHERE k.p_model IS NOT NULL
    UNION ALL
    SELECT k.*, h.pid FROM k JOIN cb_gpu_id_t i USING (gpu_uuid) JOIN cb_hour_t h ON h.hour = k.model_hour AND h.gid = i.gid
    WHERE k.p_model IS NULL
), clusters AS (
    SELECT cluster, cluster_key(cluster) AS cluster_key FROM (SELECT DISTINCT cluster FROM named)
), ct AS (
    SELECT c.cluster, any_value(t.tenant) AS tenant FROM clusters c JOIN tenant_cluster_key t USING (cluster_key)
    GROUP BY c.cluster
), ov AS (
    SELECT c.cluster, o.namespace, any_value(o.tenant) AS tenant
    FROM clusters c JOIN tenant_namespace_overrides o ON cluster_key(o.cluster) = c.cluster_key
    GROUP BY c.cluster, o.namespace
)
SELECT n.pid, coalesce(ov.tenant, ct.tenant, 'unassigned') AS tenant, n.namespace, n.pod, n.pod_uid, n.container,
       pr.price_micro, n.alloc_u, n.used_u, n.billed_u, n.waste_u, n.energy_mj, n.n
FROM named n
JOIN cb_place_t pl ON pl.pid = n.pid
JOIN cb_price pr ON pr.cluster = pl.cluster AND pr.node = pl.node AND pr.model IS NOT DISTINCT FROM pl.model
LEFT JOIN ov ON ov.cluster = n.cluster AND ov.namespace = n.namespace
LEFT JOIN ct ON ct.cluster = n.cluster;

-- cb_hour_charge_t's rows from the kept GPU-hours: those whose billed total is above their
-- capacity, with what their scaled slices were billed.
CREATE OR REPLACE TEMP MACRO kept_hour_charge(m_start, m_end, share_kind, basis) AS TABLE
WITH k AS (
    SELECT hour, gpu_uuid, slice_rows, cb_cap_u(metered_s) AS cap_u,
           kept_billed(share_kind, basis, a_dom_tot, a_mem_tot, a_cores_tot, u_tot,
                       m_dom_tot, m_mem_tot, m_cores_tot) AS b_tot,
           kept_billed(share_kind, basis, sc_a_dom, sc_a_mem, sc_a_cores, sc_u, sc_m_dom, sc_m_mem, sc_m_cores) AS billed_u
    FROM kept_gpu_hour WHERE hour >= m_start AND hour < m_end
)
SELECT g.hour, g.gid, k.billed_u, k.slice_rows, g.pid,
       cb_hour_overpaid_when(g.price_micro, k.billed_u, g.price_micro::HUGEINT * g.cap_u, g.cap_u) AS overpaid
FROM k JOIN cb_gpu_id_t i USING (gpu_uuid) JOIN cb_gpu_calc() g ON g.hour = k.hour AND g.gid = i.gid
WHERE k.b_tot > k.cap_u;

-- Whether any kept GPU-hour of [m_start, m_end) may have been billed above its capacity in
-- some share kind or basis (without one, kept_hour_charge has no rows: the bill skips its
-- pass over the month's GPU-hours).
CREATE OR REPLACE TEMP MACRO kept_any_over(m_start, m_end) AS
EXISTS (SELECT 1 FROM kept_gpu_hour
        WHERE hour >= m_start AND hour < m_end AND greatest(a_dom_tot, a_mem_tot, a_cores_tot, u_tot, m_dom_tot, m_mem_tot, m_cores_tot) > cb_cap_u(metered_s));
