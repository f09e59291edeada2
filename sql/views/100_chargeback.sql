-- Chargeback (definitions and the invariant: docs/chargeback.md).
-- Inputs of every macro: [m_start, m_end) the month's hours, src_asof NULL for the live
-- rollups or the as_of of a frozen copy, share_kind dominant|memory|cores,
-- basis allocation|usage|max. The caller fills TEMP TABLE cb_price(cluster, node, model,
-- price_micro) from the price catalog first (integer micro-units of currency per GPU-hour).
--
-- Money is exact integer arithmetic: a share is floored to integer micro-GPU-seconds
-- (so the shares on a GPU-hour can never add above its metered seconds) and a charge is
-- price_micro x micro-seconds as HUGEINT ("raw units"; 1 currency unit per GPU-hour =
-- 3.6e15 raw). Python turns raw sums into cents (chargeback/money.py).

-- Working tables the caller fills per computation (TEMP: per connection, also on
-- read-only connections). Declared here because macros bind their tables when created.
-- The month's GPU-hours are held with integer keys only: a dense id per GPU (gid, in UUID
-- order) and per placement (pid: cluster, node, GPU, model). The names live once in the
-- small id tables; at fleet scale string columns in the per-hour tables cost more memory
-- than the rest together and made every join several times slower (bench/bench_export.py).
CREATE TEMP TABLE IF NOT EXISTS cb_price (cluster VARCHAR, node VARCHAR, model VARCHAR, price_micro BIGINT);
CREATE TEMP TABLE IF NOT EXISTS cb_gpu_id_t (gpu_uuid VARCHAR, gid INTEGER);
CREATE TEMP TABLE IF NOT EXISTS cb_place_t (pid INTEGER, cluster VARCHAR, node VARCHAR, gpu_uuid VARCHAR, model VARCHAR,
                                            gid INTEGER);
-- The month's GPU-hours (cb_hours_placed, completed by bill.fill_hours), before pricing, with
-- their slices' share totals (integer micro-seconds; share kind and basis of the computation).
CREATE TEMP TABLE IF NOT EXISTS cb_hour_t (
    hour TIMESTAMP, gid INTEGER, pid INTEGER, gpu_metered_s DOUBLE, metered_s DOUBLE, energy_joules DOUBLE,
    has_gpu_row BOOLEAN, a_tot BIGINT, u_tot BIGINT, b_tot BIGINT
);
-- The GPU-hours whose placement or model no GPU row gave, while bill.fill_hours looks them up.
CREATE TEMP TABLE IF NOT EXISTS cb_fix_t (hour TIMESTAMP, gid INTEGER, gpu_uuid VARCHAR, cluster VARCHAR, node VARCHAR,
                                          model VARCHAR);
CREATE TEMP TABLE IF NOT EXISTS cb_detail_t (
    tenant VARCHAR, namespace VARCHAR, pod VARCHAR, pod_uid VARCHAR, container VARCHAR,
    cluster VARCHAR, node VARCHAR, gpu_uuid VARCHAR, model VARCHAR, price_micro BIGINT,
    alloc_u HUGEINT, used_u HUGEINT, billed_u HUGEINT, charge_raw HUGEINT, waste_raw HUGEINT,
    energy_mj HUGEINT, slice_hours BIGINT
);
-- The priced slice-hours (cb_calc) summed per slice and placement, per span of hours
-- (cb_calc_sums). The slice-hours themselves are never stored: at fleet scale they are the
-- bulk of the month.
CREATE TEMP TABLE IF NOT EXISTS cb_calc_sum_t (
    pid INTEGER, tenant VARCHAR, namespace VARCHAR, pod VARCHAR, pod_uid VARCHAR, container VARCHAR,
    price_micro BIGINT, alloc_u HUGEINT, used_u HUGEINT, billed_u HUGEINT, waste_u HUGEINT, energy_mj HUGEINT, n BIGINT
);
-- Billed micro-seconds of the GPU-hours whose shares were scaled down (elsewhere a GPU-hour
-- bills its slices' total, b_tot), the GPU side of the invariant; with the placement and
-- whether the hour was overpaid, so that the month's sums per placement need no join.
CREATE TEMP TABLE IF NOT EXISTS cb_hour_charge_t (hour TIMESTAMP, gid INTEGER, billed_u BIGINT, slice_rows BIGINT,
                                                  pid INTEGER, overpaid BOOLEAN);

-- The integer steps shared by the bill and the money kept per hour
-- (sql/views/101_kept_money.sql), so both compute the same integers: a share-seconds figure
-- as micro-GPU-seconds, a GPU-hour's capacity and energy, how busy it was, and a slice's
-- energy (the busy part by usage share, the idle part by allocation share; integer mJ).
CREATE OR REPLACE TEMP MACRO cb_micro(share_s) AS round(greatest(share_s, 0) * 1e6)::BIGINT;
CREATE OR REPLACE TEMP MACRO cb_cap_u(metered_s) AS round(metered_s * 1e6)::BIGINT;
CREATE OR REPLACE TEMP MACRO cb_energy_mj(joules) AS round(greatest(coalesce(joules, 0), 0) * 1000)::BIGINT;
CREATE OR REPLACE TEMP MACRO cb_busy(u_tot, cap_u) AS
    CASE WHEN cap_u > 0 THEN least(1.0, u_tot::DOUBLE / cap_u) ELSE 0 END;
-- What the usage basis bills above a slice-hour's usage over the part of it NVML could not
-- check, under `unverified_usage: allocation`: the allocation's excess, pro rata (the whole
-- hour unchecked: max(allocation, usage), to the micro-second).
CREATE OR REPLACE TEMP MACRO cb_unverified_stand_in(a_u, u_u, unverified_part) AS
    round(greatest(a_u - u_u, 0) * unverified_part)::BIGINT;
CREATE OR REPLACE TEMP MACRO cb_slice_energy(energy_mj, u_u, a_u, cap_u, busy) AS
    CASE WHEN cap_u > 0
         THEN round(energy_mj * (u_u::DOUBLE / cap_u) + energy_mj * (1 - busy) * (a_u::DOUBLE / cap_u))
         ELSE 0 END::BIGINT;

-- GPU-hours of the month, live or frozen.
CREATE OR REPLACE TEMP MACRO cb_gpu_src(m_start, m_end, src_asof) AS TABLE
SELECT hour, cluster, node, gpu_uuid, model, metered_s, energy_joules
FROM gpu_hour
WHERE src_asof IS NULL AND hour >= m_start AND hour < m_end
UNION ALL
SELECT hour, cluster, node, gpu_uuid, model, metered_s, energy_joules
FROM frozen_gpu_hour
WHERE as_of = src_asof AND hour >= m_start AND hour < m_end;

-- Slice-hours of the month with the paying tenant, live or frozen. Only trusted columns
-- are read: usage_share_s is built by ingest from NVML-checked memory and NVML/HAMi SM
-- utilisation; HAMi's self-reported memory never reaches it where it disagreed with NVML.
-- usage_unknown_s: the seconds no reader measured the slice's usage (sql/schema/040_dra_rollups.sql);
-- usage_unverified_s: the seconds NVML could not check it (sql/schema/030_usage_verified.sql).
CREATE OR REPLACE TEMP MACRO cb_slice_src(m_start, m_end, src_asof) AS TABLE
SELECT tenant, hour, cluster, node, gpu_uuid, namespace, pod, pod_uid, container, whole_gpu,
       metered_s, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
       usage_share_s, hami_nvml_disagree_s, coalesce(usage_unknown_s, 0) AS usage_unknown_s,
       coalesce(usage_unverified_s, 0) AS usage_unverified_s
FROM slice_hour_tenant
WHERE src_asof IS NULL AND hour >= m_start AND hour < m_end
UNION ALL
SELECT f.tenant, f.hour, f.cluster, f.node, f.gpu_uuid, f.namespace, f.pod, f.pod_uid, f.container, f.whole_gpu,
       f.metered_s, f.alloc_mem_share_s, f.alloc_cores_share_s, f.alloc_dominant_share_s,
       f.usage_share_s, f.hami_nvml_disagree_s, coalesce(d.usage_unknown_s, 0) AS usage_unknown_s,
       coalesce(u.usage_unverified_s, 0) AS usage_unverified_s
FROM frozen_slice_hour f
LEFT JOIN frozen_slice_dra d ON d.as_of = f.as_of AND d.hour = f.hour AND d.gpu_uuid = f.gpu_uuid
                            AND d.pod_uid = f.pod_uid AND d.container = f.container
LEFT JOIN frozen_slice_unverified u ON u.as_of = f.as_of AND u.hour = f.hour AND u.gpu_uuid = f.gpu_uuid
                                   AND u.pod_uid = f.pod_uid AND u.container = f.container
WHERE f.as_of = src_asof AND f.hour >= m_start AND f.hour < m_end;

-- The GPUs of the month (GPU rows and slices), a dense id each in UUID order.
CREATE OR REPLACE TEMP MACRO cb_gpu_ids(m_start, m_end, src_asof) AS TABLE
SELECT gpu_uuid, row_number() OVER (ORDER BY gpu_uuid)::INTEGER AS gid FROM (
    SELECT gpu_uuid FROM cb_gpu_src(m_start, m_end, src_asof)
    UNION
    SELECT gpu_uuid FROM cb_slice_src(m_start, m_end, src_asof)
);

-- The placements the GPU rows of the month name (cb_gpu_id_t filled first).
CREATE OR REPLACE TEMP MACRO cb_gpu_places(m_start, m_end, src_asof) AS TABLE
SELECT row_number() OVER (ORDER BY x.cluster, x.node, x.gpu_uuid, x.model)::INTEGER AS pid,
       x.cluster, x.node, x.gpu_uuid, x.model, i.gid
FROM (SELECT DISTINCT cluster, node, gpu_uuid, model FROM cb_gpu_src(m_start, m_end, src_asof)) x
JOIN cb_gpu_id_t i USING (gpu_uuid);

-- Slice-hours with their shares as integer micro-GPU-seconds (a share is floored to them so
-- that the shares on a GPU-hour can never add above its metered seconds) and the GPU's id.
-- Where no reader measured a slice's usage (usage_unknown_s), its allocation over those
-- seconds stands in for it: usage nobody measured is not billed as none, nor as waste
-- (docs/dra.md, "In the bill").
-- Basis `usage_checked` (the usage basis under the catalog's `unverified_usage: allocation`):
-- over the seconds NVML could not check a slice's usage (usage_unverified_s) the slice is
-- billed at least its allocation share, as the max basis bills it; its used share stays as
-- reported (so does its waste). Basis `usage`: as reported throughout.
CREATE OR REPLACE TEMP MACRO cb_slice_shares(m_start, m_end, src_asof, share_kind, basis) AS TABLE
WITH x AS (
    SELECT *, greatest(CASE share_kind WHEN 'memory' THEN alloc_mem_share_s
                                       WHEN 'cores'  THEN alloc_cores_share_s
                                       ELSE alloc_dominant_share_s END, 0) AS alloc_s
    FROM cb_slice_src(m_start, m_end, src_asof)
), s AS (
    SELECT x.hour, i.gid, x.tenant, x.namespace, x.pod, x.pod_uid, x.container, x.metered_s,
           cb_micro(x.alloc_s) AS a_i,
           cb_micro(greatest(x.usage_share_s, 0)
                    + CASE WHEN x.usage_unknown_s > 0 AND x.metered_s > 0
                           THEN x.alloc_s * least(1.0, x.usage_unknown_s / x.metered_s) ELSE 0 END) AS u_i,
           CASE WHEN x.usage_unverified_s > 0 AND x.metered_s > 0
                THEN least(1.0, x.usage_unverified_s / x.metered_s) ELSE 0 END AS unverified_part
    FROM x JOIN cb_gpu_id_t i USING (gpu_uuid)
)
SELECT * EXCLUDE (unverified_part),
       CASE basis WHEN 'usage' THEN u_i
                  WHEN 'usage_checked' THEN u_i + cb_unverified_stand_in(a_i, u_i, unverified_part)
                  WHEN 'max' THEN greatest(a_i, u_i) ELSE a_i END AS b_i
FROM s;

-- Every GPU-hour of [m_start, m_end) that any sample saw: the GPU's own rows (NVML) and the
-- hours where only its slices reported (NVML down on the node). Metered time is the
-- longer of the GPU's and its longest-seen slice's seconds: both come from the same
-- Ticks, so the slices extend the GPU's time only by the samples NVML missed.
-- A GPU-hour belongs to the cluster and node it was metered on in that hour (a GPU that
-- moves is billed on each side of the move). Without a GPU row the placement is unknown
-- here (pid NULL): the caller fills it in (cb_slice_placement, cb_hour_models).
-- The same pass over the slice-hours sums their shares per GPU-hour (the scaling's totals).
CREATE OR REPLACE TEMP MACRO cb_hours_placed(m_start, m_end, src_asof, share_kind, basis) AS TABLE
WITH g AS (
    SELECT x.hour, p.gid, p.pid, x.metered_s, x.energy_joules
    FROM cb_gpu_src(m_start, m_end, src_asof) x
    JOIN cb_place_t p ON p.cluster = x.cluster AND p.node = x.node AND p.gpu_uuid = x.gpu_uuid
                     AND p.model IS NOT DISTINCT FROM x.model
), s AS (
    SELECT hour, gid, max(least(greatest(metered_s, 0), 3600.0)) AS slice_metered_s,
           sum(a_i)::BIGINT AS a_tot, sum(u_i)::BIGINT AS u_tot, sum(b_i)::BIGINT AS b_tot
    FROM cb_slice_shares(m_start, m_end, src_asof, share_kind, basis)
    GROUP BY hour, gid
)
SELECT coalesce(g.hour, s.hour) AS hour, coalesce(g.gid, s.gid) AS gid, g.pid,
       coalesce(least(greatest(g.metered_s, 0), 3600.0), 0) AS gpu_metered_s,
       greatest(coalesce(least(greatest(g.metered_s, 0), 3600.0), 0), coalesce(s.slice_metered_s, 0)) AS metered_s,
       g.energy_joules, g.pid IS NOT NULL AS has_gpu_row,
       coalesce(s.a_tot, 0) AS a_tot, coalesce(s.u_tot, 0) AS u_tot, coalesce(s.b_tot, 0) AS b_tot
FROM g FULL OUTER JOIN s ON g.hour = s.hour AND g.gid = s.gid;

-- The GPU-hours of cb_hour_t without a placement (only slices saw them) or without a model,
-- with what is known of them.
CREATE OR REPLACE TEMP MACRO cb_hours_to_fix() AS TABLE
SELECT h.hour, h.gid, i.gpu_uuid, p.cluster, p.node, p.model
FROM cb_hour_t h JOIN cb_gpu_id_t i USING (gid) LEFT JOIN cb_place_t p USING (pid)
WHERE h.pid IS NULL OR p.model IS NULL;

-- The placement of the GPU-hours in cb_fix_t that only slices saw: where the
-- longest-seen slice was (ties: the smallest cluster, then node, so the same data always
-- gives the same bill). A second, rare read of those hours' slices: the struct minimum
-- over every slice-hour of the month costs more than the rest of the placement.
CREATE OR REPLACE TEMP MACRO cb_slice_placement(m_start, m_end, src_asof) AS TABLE
WITH only_slices AS (
    SELECT hour, gpu_uuid FROM cb_fix_t WHERE cluster IS NULL
), p AS (
    SELECT x.hour, x.gpu_uuid, min(struct_pack(neg_s := -x.metered_s, c := x.cluster, n := x.node)) AS place
    FROM cb_slice_src(m_start, m_end, src_asof) x SEMI JOIN only_slices o ON o.hour = x.hour AND o.gpu_uuid = x.gpu_uuid
    GROUP BY x.hour, x.gpu_uuid
)
SELECT hour, gpu_uuid, place.c AS cluster, place.n AS node FROM p;

-- The model of the GPU-hours in cb_fix_t without one: the GPU's last known model earlier
-- in the month, else before the month, else the first one seen later in the month.
CREATE OR REPLACE TEMP MACRO cb_hour_models(m_start, m_end, src_asof) AS TABLE
WITH unknown AS (
    SELECT hour, gpu_uuid FROM cb_fix_t WHERE model IS NULL
), known AS (
    SELECT hour, gpu_uuid, model FROM cb_gpu_src(m_start, m_end, src_asof) WHERE model IS NOT NULL
), before_h AS (
    SELECT u.hour, u.gpu_uuid, k.model FROM unknown u ASOF JOIN known k ON u.gpu_uuid = k.gpu_uuid AND u.hour >= k.hour
), after_h AS (
    SELECT u.hour, u.gpu_uuid, k.model FROM unknown u ASOF JOIN known k ON u.gpu_uuid = k.gpu_uuid AND u.hour <= k.hour
), prior AS (
    SELECT gpu_uuid, arg_max(model, hour) AS model
    FROM gpu_hour
    WHERE hour < m_start AND model IS NOT NULL AND gpu_uuid IN (SELECT gpu_uuid FROM unknown)
    GROUP BY gpu_uuid
)
SELECT u.hour, u.gpu_uuid, coalesce(before_h.model, prior.model, after_h.model) AS model
FROM unknown u
LEFT JOIN before_h ON before_h.hour = u.hour AND before_h.gpu_uuid = u.gpu_uuid
LEFT JOIN after_h ON after_h.hour = u.hour AND after_h.gpu_uuid = u.gpu_uuid
LEFT JOIN prior ON prior.gpu_uuid = u.gpu_uuid;

-- Priced GPU-hours of cb_hour_t: capacity in micro-seconds and the price of their placement.
-- k: one integer key per GPU-hour (hour number x 2^22 + gid).
CREATE OR REPLACE TEMP MACRO cb_gpu_calc() AS TABLE
WITH priced AS (
    SELECT pl.pid, p.price_micro
    FROM cb_place_t pl JOIN cb_price p ON p.cluster = pl.cluster AND p.node = pl.node
                                      AND p.model IS NOT DISTINCT FROM pl.model
)
SELECT h.hour, h.gid, h.pid, priced.price_micro,
       (epoch_ms(h.hour) // 3600000) * 4194304 + h.gid AS k,
       cb_cap_u(h.metered_s) AS cap_u, cb_energy_mj(h.energy_joules) AS energy_mj,
       h.a_tot, h.u_tot, h.b_tot
FROM cb_hour_t h JOIN priced USING (pid);

-- A share of a GPU-hour whose shares total `total` with capacity `cap`: floor(share x cap /
-- total) where the total is above the capacity. The product is exact in 64 unsigned bits
-- while both factors are below 2^32 (a capacity always is: at most 3.6e9 micro-seconds),
-- several times cheaper than 128-bit arithmetic, which the rest takes.
CREATE OR REPLACE TEMP MACRO cb_scaled(share, total, cap) AS (CASE
    WHEN total <= cap THEN share
    WHEN share < 4294967296 AND cap < 4294967296 THEN (share::UBIGINT * cap::UBIGINT) // total::UBIGINT
    ELSE (share::HUGEINT * cap) // total
END)::BIGINT;

-- A GPU-hour whose slices paid more than it cost (or were billed more than its capacity).
CREATE OR REPLACE TEMP MACRO cb_hour_overpaid_when(price_micro, billed_u, cost_raw, cap_u) AS
    price_micro::HUGEINT * billed_u > cost_raw OR billed_u > cap_u;

-- Every slice-hour of [m_start, m_end) priced: shares scaled down where a GPU-hour is
-- oversubscribed. Integer micro-GPU-seconds, so totals and the scaling (integer floor
-- division) are exact and independent of the order DuckDB sums in: the same database
-- always gives the same bill, and the shares on a GPU-hour never add above its capacity.
CREATE OR REPLACE TEMP MACRO cb_calc(m_start, m_end, src_asof, share_kind, basis) AS TABLE
WITH g AS (
    SELECT * FROM cb_gpu_calc() WHERE hour >= m_start AND hour < m_end
), scaled AS (
    SELECT s.hour, s.gid, g.pid, s.tenant, s.namespace, s.pod, s.pod_uid, s.container, g.price_micro, g.cap_u,
           g.energy_mj, g.b_tot,
           cb_scaled(s.a_i, g.a_tot, g.cap_u) AS a_u, cb_scaled(s.u_i, g.u_tot, g.cap_u) AS u_u,
           cb_scaled(s.b_i, g.b_tot, g.cap_u) AS b_u,
           cb_busy(g.u_tot, g.cap_u) AS busy
    FROM cb_slice_shares(m_start, m_end, src_asof, share_kind, basis) s
    JOIN g ON g.hour = s.hour AND g.gid = s.gid
)
SELECT *,
       greatest(a_u - u_u, 0) AS waste_u,
       -- energy: what no slice holds stays with the platform
       cb_slice_energy(energy_mj, u_u, a_u, cap_u, busy) AS energy_mj_slice
FROM scaled;

-- cb_calc's slice-hours summed per slice and placement (partial detail lines of a span of
-- hours; the caller adds them to cb_calc_sum_t). Integer sums; charges (price x share) are
-- multiplied out on the aggregated rows (one price per placement).
CREATE OR REPLACE TEMP MACRO cb_calc_sums(m_start, m_end, src_asof, share_kind, basis) AS TABLE
SELECT pid, tenant, namespace, pod, pod_uid, container, price_micro,
       sum(a_u)::HUGEINT AS alloc_u, sum(u_u)::HUGEINT AS used_u, sum(b_u)::HUGEINT AS billed_u,
       sum(waste_u)::HUGEINT AS waste_u, sum(energy_mj_slice)::HUGEINT AS energy_mj, count(*)::BIGINT AS n
FROM cb_calc(m_start, m_end, src_asof, share_kind, basis)
GROUP BY pid, tenant, namespace, pod, pod_uid, container, price_micro;

-- The GPU-hours of a span whose shares were scaled down, with what their slices were billed
-- (the caller adds them to cb_hour_charge_t). A GPU-hour whose billed total is not above its
-- capacity bills exactly that total (b_tot), so only the scaled ones are summed again, in a
-- pass of their own that computes only the billed share (about what feeding both aggregates
-- from one pass costs, without a per-GPU-hour table of mostly empty columns).
CREATE OR REPLACE TEMP MACRO cb_hour_charge(m_start, m_end, src_asof, share_kind, basis) AS TABLE
SELECT hour, gid, sum(b_u)::BIGINT AS billed_u, count(*)::BIGINT AS slice_rows, any_value(pid) AS pid,
       cb_hour_overpaid_when(any_value(price_micro), sum(b_u), any_value(price_micro)::HUGEINT * any_value(cap_u),
                             any_value(cap_u)) AS overpaid
FROM cb_calc(m_start, m_end, src_asof, share_kind, basis)
WHERE b_tot > cap_u
GROUP BY hour, gid;

-- Per slice, placement and month: the bill's detail lines before the idle policy (the
-- partial sums of cb_calc_sum_t added up).
CREATE OR REPLACE TEMP MACRO cb_detail() AS TABLE
WITH d AS (
    SELECT pid, tenant, namespace, pod, pod_uid, container, price_micro,
           sum(alloc_u)::HUGEINT AS alloc_u, sum(used_u)::HUGEINT AS used_u, sum(billed_u)::HUGEINT AS billed_u,
           sum(waste_u)::HUGEINT AS waste_u, sum(energy_mj)::HUGEINT AS energy_mj, sum(n)::BIGINT AS n
    FROM cb_calc_sum_t
    GROUP BY pid, tenant, namespace, pod, pod_uid, container, price_micro
)
SELECT d.tenant, coalesce(d.namespace, '') AS namespace, coalesce(d.pod, '') AS pod, d.pod_uid, d.container,
       p.cluster, p.node, p.gpu_uuid, coalesce(p.model, '') AS model, d.price_micro,
       d.alloc_u, d.used_u, d.billed_u, (d.price_micro::HUGEINT * d.billed_u)::HUGEINT AS charge_raw,
       (d.price_micro::HUGEINT * d.waste_u)::HUGEINT AS waste_raw, d.energy_mj, d.n AS slice_hours
FROM d JOIN cb_place_t p USING (pid);

-- Per priced GPU-hour: capacity, cost and what its slices were billed (b_tot, or the sum
-- of the scaled shares in cb_hour_charge_t).
CREATE OR REPLACE TEMP MACRO cb_hour_billed() AS TABLE
SELECT g.hour, g.gid, g.pid, g.price_micro, g.cap_u, g.energy_mj,
       (g.price_micro::HUGEINT * g.cap_u)::HUGEINT AS cost_raw,
       CASE WHEN g.b_tot > g.cap_u THEN coalesce(c.billed_u, 0) ELSE g.b_tot END::HUGEINT AS billed_u
FROM cb_gpu_calc() g LEFT JOIN cb_hour_charge_t c ON c.hour = g.hour AND c.gid = g.gid;

-- Per placement and month: capacity, cost, what the slices paid and idle, each summed
-- from the GPU-hours, independently of the detail lines; and how many of its GPU-hours
-- were overpaid (cb_hour_overpaid names them). A placement has one price, so what its
-- slices paid is that price x the micro-seconds billed: the hours that bill their slices'
-- total (b_tot) and the scaled ones (cb_hour_charge_t) are summed apart, without a join
-- per GPU-hour.
-- Reads cb_detail_t only for the idle energy.
CREATE OR REPLACE TEMP MACRO cb_gpu_agg() AS TABLE
WITH h AS (
    SELECT pid, any_value(price_micro) AS price_micro,
           sum(cap_u)::HUGEINT AS metered_u, sum(price_micro::HUGEINT * cap_u)::HUGEINT AS cost_raw,
           sum(CASE WHEN b_tot > cap_u THEN 0 ELSE b_tot END)::HUGEINT AS billed_u,
           sum(energy_mj)::HUGEINT AS energy_mj, count(*) AS gpu_hours_seen,
           min(hour) AS first_hour, max(hour) AS last_hour,
           count(*) FILTER (WHERE b_tot <= cap_u
                            AND cb_hour_overpaid_when(price_micro, b_tot, price_micro::HUGEINT * cap_u, cap_u))
               AS overpaid_hours
    FROM cb_gpu_calc()
    GROUP BY pid
), c AS (
    SELECT pid, sum(billed_u)::HUGEINT AS billed_u, count(*) FILTER (WHERE overpaid) AS overpaid_hours
    FROM cb_hour_charge_t
    GROUP BY pid
), b AS (
    SELECT h.pid, h.price_micro, h.metered_u, h.cost_raw, (h.billed_u + coalesce(c.billed_u, 0))::HUGEINT AS billed_u,
           h.energy_mj, h.gpu_hours_seen, h.first_hour, h.last_hour,
           h.overpaid_hours + coalesce(c.overpaid_hours, 0) AS overpaid_hours
    FROM h LEFT JOIN c USING (pid)
), g AS (
    SELECT pid, price_micro, metered_u, cost_raw, (price_micro::HUGEINT * billed_u)::HUGEINT AS charged_raw,
           (cost_raw - price_micro::HUGEINT * billed_u)::HUGEINT AS idle_raw, (metered_u - billed_u)::HUGEINT AS idle_u,
           energy_mj, gpu_hours_seen, first_hour, last_hour, overpaid_hours
    FROM b
), e AS (
    SELECT cluster, node, gpu_uuid, model, sum(energy_mj)::HUGEINT AS energy_mj_slices
    FROM cb_detail_t GROUP BY ALL
)
SELECT p.cluster, p.node, p.gpu_uuid, coalesce(p.model, '') AS model, g.* EXCLUDE (pid),
       greatest(g.energy_mj - coalesce(e.energy_mj_slices, 0), 0)::HUGEINT AS idle_energy_mj
FROM g JOIN cb_place_t p USING (pid)
LEFT JOIN e ON e.cluster = p.cluster AND e.node = p.node AND e.gpu_uuid = p.gpu_uuid AND e.model = coalesce(p.model, '')
ORDER BY p.cluster, p.node, p.gpu_uuid, model;

-- GPU-hours that break the invariant before any money is rounded: slices that paid more
-- than the hour cost. (The caller runs it only where cb_gpu_agg counted some.)
CREATE OR REPLACE TEMP MACRO cb_hour_overpaid() AS TABLE
SELECT i.gpu_uuid, b.hour, 'slices paid ' || (b.price_micro::HUGEINT * b.billed_u)::VARCHAR
       || ' raw of a GPU-hour costing ' || b.cost_raw::VARCHAR AS problem
FROM cb_hour_billed() b JOIN cb_gpu_id_t i USING (gid)
WHERE cb_hour_overpaid_when(b.price_micro, b.billed_u, b.cost_raw, b.cap_u)
ORDER BY 1, 2;

-- Slice-hours that found no priced GPU-hour or were not all billed (they would vanish).
-- The caller runs it only when the counts differ (it reads every slice-hour again).
CREATE OR REPLACE TEMP MACRO cb_hour_unbilled(m_start, m_end, src_asof) AS TABLE
WITH stored AS (
    SELECT gpu_uuid, hour, count(*) AS n FROM cb_slice_src(m_start, m_end, src_asof) GROUP BY ALL
), billed AS (
    SELECT s.hour, s.gid, count(*) AS n
    FROM cb_slice_shares(m_start, m_end, src_asof, 'dominant', 'allocation') s
    JOIN cb_gpu_calc() g ON g.hour = s.hour AND g.gid = s.gid
    GROUP BY ALL
)
SELECT s.gpu_uuid, s.hour,
       CASE WHEN b.n IS NULL THEN s.n::VARCHAR || ' slice-hours without a priced GPU-hour'
            ELSE 'billed ' || b.n::VARCHAR || ' of ' || s.n::VARCHAR || ' slice-hours' END AS problem
FROM stored s LEFT JOIN cb_gpu_id_t i USING (gpu_uuid) LEFT JOIN billed b ON b.hour = s.hour AND b.gid = i.gid
WHERE b.n IS DISTINCT FROM s.n
ORDER BY 1, 2;

-- Per GPU and hour of the month, the hours not fully metered by NVML, and why:
-- "no samples" (nothing saw the GPU), "NVML down" (its slices reported without GPU
-- samples for some or all of the hour), "partial" (part of the hour had no sample at all).
-- A GPU is listed from the month's first to its last hour once any sample saw it in the
-- month; an hour without samples carries the GPU's last placement before it (else the next).
CREATE OR REPLACE TEMP MACRO cb_unmetered_hours(m_start, m_end) AS TABLE
WITH seen AS (
    SELECT gid, hour, pid,
           lag(hour) OVER w IS NULL AS first_seen, coalesce(lead(hour) OVER w, m_end::TIMESTAMP) AS next_hour
    FROM cb_hour_t WINDOW w AS (PARTITION BY gid ORDER BY hour)
), gaps AS (
    -- the hours without samples are the gaps between the hours seen: after a seen hour
    -- (up to the next, or the month's end) at its placement, before the first one at that one's
    SELECT gid, pid, hour + INTERVAL 1 HOUR AS gap_start, next_hour AS gap_end
    FROM seen WHERE next_hour > hour + INTERVAL 1 HOUR
    UNION ALL
    SELECT gid, pid, m_start::TIMESTAMP, hour FROM seen WHERE first_seen AND hour > m_start::TIMESTAMP
), hours AS (
    SELECT gid, pid, unnest(generate_series(gap_start, gap_end - INTERVAL 1 HOUR, INTERVAL 1 HOUR)) AS hour,
           0.0::DOUBLE AS metered_s, 0.0::DOUBLE AS gpu_metered_s, 3600.0::DOUBLE AS unmetered_s, 'no samples' AS reason
    FROM gaps
    UNION ALL
    SELECT gid, pid, hour, metered_s, gpu_metered_s, 3600.0 - metered_s,
           concat_ws(', ', CASE WHEN gpu_metered_s < metered_s THEN 'NVML down' END,
                           CASE WHEN metered_s < 3600.0 THEN 'partial' END)
    FROM cb_hour_t
    WHERE gpu_metered_s < metered_s OR metered_s < 3600.0
)
SELECT h.hour, p.cluster, p.node, p.gpu_uuid, coalesce(p.model, '') AS model, h.metered_s, h.gpu_metered_s,
       h.unmetered_s, h.reason
FROM hours h JOIN cb_place_t p USING (pid)
ORDER BY h.gid, h.hour;

-- Per GPU and month: hours seen, metered and unmetered hours (cb_hour_t), at the GPU's
-- latest placement of the month.
CREATE OR REPLACE TEMP MACRO cb_unmetered(m_start, m_end) AS TABLE
WITH g AS (
    SELECT gid, arg_max(pid, hour) AS pid, count(*) AS hours_with_samples,
           sum(metered_s) / 3600.0 AS metered_hours,
           sum(metered_s - gpu_metered_s) / 3600.0 AS nvml_down_hours
    FROM cb_hour_t
    GROUP BY gid
)
SELECT p.cluster, p.node, p.gpu_uuid, coalesce(p.model, '') AS model, g.hours_with_samples, g.metered_hours,
       g.nvml_down_hours,
       epoch(m_end::TIMESTAMP - m_start::TIMESTAMP) / 3600.0 - g.metered_hours AS unmetered_hours
FROM g JOIN cb_place_t p USING (pid)
ORDER BY p.cluster, p.node, p.gpu_uuid;

-- Fingerprint of a month's billing inputs (live when src_asof is NULL, else a frozen
-- copy): equal fingerprints = nothing new to correct. Order-independent (a sum of hashes).
CREATE OR REPLACE TEMP MACRO cb_fingerprint(m_start, m_end, src_asof) AS TABLE
SELECT (SELECT count(*) FROM cb_gpu_src(m_start, m_end, src_asof)) AS gpu_rows,
       (SELECT coalesce(sum(hash(hour, cluster, node, gpu_uuid, model, metered_s, energy_joules)::HUGEINT), 0)
          FROM cb_gpu_src(m_start, m_end, src_asof)) AS gpu_hash,
       (SELECT count(*) FROM cb_slice_src(m_start, m_end, src_asof)) AS slice_rows,
       (SELECT coalesce(sum(hash(tenant, hour, cluster, node, gpu_uuid, namespace, pod, pod_uid, container,
                                 whole_gpu, metered_s, alloc_mem_share_s, alloc_cores_share_s,
                                 alloc_dominant_share_s, usage_share_s, hami_nvml_disagree_s,
                                 usage_unknown_s, usage_unverified_s)::HUGEINT), 0)
          FROM cb_slice_src(m_start, m_end, src_asof)) AS slice_hash;
