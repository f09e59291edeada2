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
CREATE TEMP TABLE IF NOT EXISTS cb_price (cluster VARCHAR, node VARCHAR, model VARCHAR, price_micro BIGINT);
-- The month's GPU-hours (cb_hours_placed, completed by bill.fill_hours), before pricing.
CREATE TEMP TABLE IF NOT EXISTS cb_hour_t (
    hour TIMESTAMP, gpu_uuid VARCHAR, cluster VARCHAR, node VARCHAR, model VARCHAR,
    gpu_metered_s DOUBLE, metered_s DOUBLE, energy_joules DOUBLE, has_gpu_row BOOLEAN
);
CREATE TEMP TABLE IF NOT EXISTS cb_detail_t (
    tenant VARCHAR, namespace VARCHAR, pod VARCHAR, pod_uid VARCHAR, container VARCHAR,
    cluster VARCHAR, node VARCHAR, gpu_uuid VARCHAR, model VARCHAR, price_micro BIGINT,
    alloc_u HUGEINT, used_u HUGEINT, billed_u HUGEINT, charge_raw HUGEINT, waste_raw HUGEINT,
    energy_mj HUGEINT, slice_hours BIGINT
);
-- The month's priced GPU-hours (cb_gpu_calc), read by every step after pricing.
CREATE TEMP TABLE IF NOT EXISTS cb_gpu_t (
    hour TIMESTAMP, cluster VARCHAR, node VARCHAR, gpu_uuid VARCHAR, model VARCHAR, gid BIGINT, pid BIGINT,
    price_micro BIGINT, k BIGINT, cap_u BIGINT, cost_raw HUGEINT, energy_mj BIGINT
);
-- The priced slice-hours of the month (cb_calc) summed in one pass two ways (cb_calc_sums):
-- per slice and placement (per_slice, the detail lines) and per GPU-hour (k, what its
-- slices paid). The slice-hours themselves are never stored: at fleet scale they are the
-- bulk of the month.
CREATE TEMP TABLE IF NOT EXISTS cb_calc_sum_t (
    per_slice BOOLEAN, k BIGINT, pid BIGINT, tenant VARCHAR, namespace VARCHAR, pod VARCHAR, pod_uid VARCHAR,
    container VARCHAR, price_micro BIGINT, alloc_u HUGEINT, used_u HUGEINT, billed_u HUGEINT, waste_u HUGEINT,
    energy_mj HUGEINT, n BIGINT
);
-- What the slices of each GPU-hour paid (cb_hour_charge), the GPU side of the invariant.
CREATE TEMP TABLE IF NOT EXISTS cb_hour_charge_t (
    hour TIMESTAMP, gpu_uuid VARCHAR, charged_raw HUGEINT, billed_u HUGEINT, slice_rows BIGINT
);

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
CREATE OR REPLACE TEMP MACRO cb_slice_src(m_start, m_end, src_asof) AS TABLE
SELECT tenant, hour, cluster, node, gpu_uuid, namespace, pod, pod_uid, container, whole_gpu,
       metered_s, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
       usage_share_s, hami_nvml_disagree_s
FROM slice_hour_tenant
WHERE src_asof IS NULL AND hour >= m_start AND hour < m_end
UNION ALL
SELECT tenant, hour, cluster, node, gpu_uuid, namespace, pod, pod_uid, container, whole_gpu,
       metered_s, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
       usage_share_s, hami_nvml_disagree_s
FROM frozen_slice_hour
WHERE as_of = src_asof AND hour >= m_start AND hour < m_end;

-- Every GPU-hour of the month that any sample saw: the GPU's own rows (NVML) and the
-- hours where only its slices reported (NVML down on the node). Metered time is the
-- longer of the GPU's and its longest-seen slice's seconds: both come from the same
-- Ticks, so the slices extend the GPU's time only by the samples NVML missed.
-- A GPU-hour belongs to the cluster and node it was metered on in that hour (a GPU that
-- moves is billed on each side of the move). Without a GPU row the placement and model
-- are unknown here: the caller fills them in (cb_slice_placement, cb_hour_models).
CREATE OR REPLACE TEMP MACRO cb_hours_placed(m_start, m_end, src_asof) AS TABLE
WITH g AS (
    SELECT * FROM cb_gpu_src(m_start, m_end, src_asof)
), s AS (
    -- per GPU-hour its slices' longest metered time
    SELECT hour, gpu_uuid, max(least(greatest(metered_s, 0), 3600.0)) AS slice_metered_s
    FROM cb_slice_src(m_start, m_end, src_asof) GROUP BY hour, gpu_uuid
)
SELECT coalesce(g.hour, s.hour) AS hour, coalesce(g.gpu_uuid, s.gpu_uuid) AS gpu_uuid,
       g.cluster, g.node, g.model,
       coalesce(least(greatest(g.metered_s, 0), 3600.0), 0) AS gpu_metered_s,
       greatest(coalesce(least(greatest(g.metered_s, 0), 3600.0), 0), coalesce(s.slice_metered_s, 0)) AS metered_s,
       g.energy_joules, g.gpu_uuid IS NOT NULL AS has_gpu_row
FROM g FULL OUTER JOIN s ON g.hour = s.hour AND g.gpu_uuid = s.gpu_uuid;

-- The placement of the GPU-hours in cb_hour_t that only slices saw: where the
-- longest-seen slice was (ties: the smallest cluster, then node, so the same data always
-- gives the same bill). A second, rare read of those hours' slices: the struct minimum
-- over every slice-hour of the month costs more than the rest of the placement.
CREATE OR REPLACE TEMP MACRO cb_slice_placement(m_start, m_end, src_asof) AS TABLE
WITH only_slices AS (
    SELECT hour, gpu_uuid FROM cb_hour_t WHERE NOT has_gpu_row
), p AS (
    SELECT x.hour, x.gpu_uuid, min(struct_pack(neg_s := -x.metered_s, c := x.cluster, n := x.node)) AS place
    FROM cb_slice_src(m_start, m_end, src_asof) x SEMI JOIN only_slices o ON o.hour = x.hour AND o.gpu_uuid = x.gpu_uuid
    GROUP BY x.hour, x.gpu_uuid
)
SELECT hour, gpu_uuid, place.c AS cluster, place.n AS node FROM p;

-- The model of the GPU-hours in cb_hour_t without one (hours only slices saw): the GPU's
-- last known model earlier in the month, else before the month, else the first one seen
-- later in the month. (The caller runs it only where some hour has no model: the look-ups
-- below sort the whole month once more.)
CREATE OR REPLACE TEMP MACRO cb_hour_models(m_start, m_end, src_asof) AS TABLE
WITH unknown AS (
    SELECT hour, gpu_uuid FROM cb_hour_t WHERE model IS NULL
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

-- Priced GPU-hours from cb_hour_t (the caller keeps them in cb_gpu_t): capacity in
-- micro-seconds and its cost in raw units.
-- gid: a dense id per GPU; pid: per placement (cluster, node, GPU, model), the unit of
-- the GPU side of the bill.
CREATE OR REPLACE TEMP MACRO cb_gpu_calc() AS TABLE
WITH ids AS (
    SELECT gpu_uuid, row_number() OVER (ORDER BY gpu_uuid)::BIGINT AS gid
    FROM (SELECT DISTINCT gpu_uuid FROM cb_hour_t)
), pids AS (
    SELECT cluster, node, gpu_uuid, model, row_number() OVER (ORDER BY cluster, node, gpu_uuid, model)::BIGINT AS pid
    FROM (SELECT DISTINCT cluster, node, gpu_uuid, model FROM cb_hour_t)
)
SELECT h.hour, h.cluster, h.node, h.gpu_uuid, h.model, ids.gid, pids.pid, p.price_micro,
       (epoch_ms(h.hour) // 3600000) * 4194304 + ids.gid AS k,
       round(h.metered_s * 1e6)::BIGINT AS cap_u,
       p.price_micro::HUGEINT * round(h.metered_s * 1e6)::BIGINT AS cost_raw,
       round(greatest(coalesce(h.energy_joules, 0), 0) * 1000)::BIGINT AS energy_mj
FROM cb_hour_t h
JOIN ids USING (gpu_uuid)
JOIN pids ON pids.cluster = h.cluster AND pids.node = h.node AND pids.gpu_uuid = h.gpu_uuid
         AND pids.model IS NOT DISTINCT FROM h.model
JOIN cb_price p ON p.cluster = h.cluster AND p.node = h.node AND p.model IS NOT DISTINCT FROM h.model;

-- Every slice-hour priced: shares scaled down where a GPU-hour is oversubscribed.
-- Shares become integer micro-GPU-seconds first, so totals and the scaling (integer floor
-- division) are exact and independent of the order DuckDB sums in: the same database
-- always gives the same bill, and the shares on a GPU-hour never add above its capacity.
-- GPU-hours are joined on one integer key (hour number x 2^22 + a dense GPU id): string
-- keys made the big joins several times slower at fleet scale (bench/bench_export.py).
CREATE OR REPLACE TEMP MACRO cb_calc(m_start, m_end, src_asof, share_kind, basis) AS TABLE
WITH g AS (
    SELECT k, gid, pid, price_micro, cap_u, energy_mj FROM cb_gpu_t
), ids AS (
    SELECT DISTINCT gpu_uuid, gid FROM cb_gpu_t
), s AS NOT MATERIALIZED (
    SELECT (epoch_ms(x.hour) // 3600000) * 4194304 + ids.gid AS k,
           x.tenant, x.namespace, x.pod, x.pod_uid, x.container,
           round(greatest(CASE share_kind WHEN 'memory' THEN x.alloc_mem_share_s
                                          WHEN 'cores'  THEN x.alloc_cores_share_s
                                          ELSE x.alloc_dominant_share_s END, 0) * 1e6)::BIGINT AS a_i,
           round(greatest(x.usage_share_s, 0) * 1e6)::BIGINT AS u_i
    FROM cb_slice_src(m_start, m_end, src_asof) x JOIN ids USING (gpu_uuid)
), b AS NOT MATERIALIZED (
    SELECT *, CASE basis WHEN 'usage' THEN u_i WHEN 'max' THEN greatest(a_i, u_i) ELSE a_i END AS b_i
    FROM s
), tot AS (
    SELECT k, sum(a_i)::HUGEINT AS a_tot, sum(u_i)::HUGEINT AS u_tot, sum(b_i)::HUGEINT AS b_tot
    FROM b GROUP BY k
), gt AS (
    SELECT g.*, tot.a_tot, tot.u_tot, tot.b_tot FROM g JOIN tot USING (k)
), scaled AS (
    SELECT b.k, gt.gid, gt.pid, b.tenant, b.namespace, b.pod, b.pod_uid, b.container, gt.price_micro, gt.cap_u, gt.energy_mj,
           (CASE WHEN gt.a_tot > gt.cap_u THEN (b.a_i::HUGEINT * gt.cap_u) // gt.a_tot ELSE b.a_i END)::BIGINT AS a_u,
           (CASE WHEN gt.u_tot > gt.cap_u THEN (b.u_i::HUGEINT * gt.cap_u) // gt.u_tot ELSE b.u_i END)::BIGINT AS u_u,
           (CASE WHEN gt.b_tot > gt.cap_u THEN (b.b_i::HUGEINT * gt.cap_u) // gt.b_tot ELSE b.b_i END)::BIGINT AS b_u,
           CASE WHEN gt.cap_u > 0 THEN least(1.0, gt.u_tot::DOUBLE / gt.cap_u) ELSE 0 END AS busy
    FROM b JOIN gt USING (k)
)
SELECT *,
       greatest(a_u - u_u, 0) AS waste_u,
       -- energy: the busy part of the hour's energy by usage share, the idle part by
       -- allocation share; what no slice holds stays with the platform. Integer mJ per
       -- row so that sums are exact.
       CASE WHEN cap_u > 0
            THEN round(energy_mj * (u_u::DOUBLE / cap_u) + energy_mj * (1 - busy) * (a_u::DOUBLE / cap_u))
            ELSE 0 END::BIGINT AS energy_mj_slice
FROM scaled;

-- cb_calc's slice-hours summed per slice and placement and per GPU-hour, in one pass
-- (the caller keeps them in cb_calc_sum_t). Integer sums; charges (price x share) are
-- multiplied out on the aggregated rows (one price per placement and per GPU-hour). The
-- two groupings are separate aggregates over one streamed input rather than GROUPING
-- SETS, which would compute every sum for the GPU-hours too, where only the billed time
-- and the count are read.
CREATE OR REPLACE TEMP MACRO cb_calc_sums(m_start, m_end, src_asof, share_kind, basis) AS TABLE
WITH c AS (
    SELECT * FROM cb_calc(m_start, m_end, src_asof, share_kind, basis)
)
SELECT false AS per_slice, k, NULL::BIGINT AS pid, NULL::VARCHAR AS tenant, NULL::VARCHAR AS namespace,
       NULL::VARCHAR AS pod, NULL::VARCHAR AS pod_uid, NULL::VARCHAR AS container, NULL::BIGINT AS price_micro,
       NULL::HUGEINT AS alloc_u, NULL::HUGEINT AS used_u, sum(b_u)::HUGEINT AS billed_u, NULL::HUGEINT AS waste_u,
       NULL::HUGEINT AS energy_mj, count(*)::BIGINT AS n
FROM c GROUP BY k
UNION ALL
SELECT true, NULL, pid, tenant, namespace, pod, pod_uid, container, price_micro,
       sum(a_u)::HUGEINT, sum(u_u)::HUGEINT, sum(b_u)::HUGEINT, sum(waste_u)::HUGEINT,
       sum(energy_mj_slice)::HUGEINT, count(*)::BIGINT
FROM c GROUP BY pid, tenant, namespace, pod, pod_uid, container, price_micro;

-- Per slice, placement and month: the bill's detail lines before the idle policy
-- (cb_calc_sum_t).
CREATE OR REPLACE TEMP MACRO cb_detail() AS TABLE
WITH pids AS (
    SELECT DISTINCT pid, cluster, node, gpu_uuid, model FROM cb_gpu_t
)
SELECT d.tenant, coalesce(d.namespace, '') AS namespace, coalesce(d.pod, '') AS pod, d.pod_uid, d.container,
       pids.cluster, pids.node, pids.gpu_uuid, coalesce(pids.model, '') AS model, d.price_micro,
       d.alloc_u, d.used_u, d.billed_u, (d.price_micro::HUGEINT * d.billed_u)::HUGEINT AS charge_raw,
       (d.price_micro::HUGEINT * d.waste_u)::HUGEINT AS waste_raw, d.energy_mj, d.n AS slice_hours
FROM cb_calc_sum_t d JOIN pids USING (pid)
WHERE d.per_slice;

-- Per GPU-hour: what its slices paid (raw) and their billed micro-seconds (cb_calc_sum_t).
CREATE OR REPLACE TEMP MACRO cb_hour_charge() AS TABLE
SELECT g.hour, g.gpu_uuid, (g.price_micro::HUGEINT * c.billed_u)::HUGEINT AS charged_raw, c.billed_u, c.n AS slice_rows
FROM cb_calc_sum_t c JOIN cb_gpu_t g USING (k)
WHERE NOT c.per_slice;

-- Per placement and month: capacity, cost, what the slices paid and idle, each summed
-- from the GPU-hours (cb_hour_charge_t), independently of the detail lines.
-- Reads cb_detail_t only for the idle energy.
CREATE OR REPLACE TEMP MACRO cb_gpu_agg() AS TABLE
WITH g AS (
    SELECT g.cluster, g.node, g.gpu_uuid, coalesce(g.model, '') AS model, any_value(g.price_micro) AS price_micro,
           sum(g.cap_u)::HUGEINT AS metered_u, sum(g.cost_raw)::HUGEINT AS cost_raw,
           sum(coalesce(c.charged_raw, 0))::HUGEINT AS charged_raw,
           sum(g.cost_raw - coalesce(c.charged_raw, 0))::HUGEINT AS idle_raw,
           sum(g.cap_u - coalesce(c.billed_u, 0))::HUGEINT AS idle_u,
           sum(g.energy_mj)::HUGEINT AS energy_mj, count(*) AS gpu_hours_seen,
           min(g.hour) AS first_hour, max(g.hour) AS last_hour
    FROM cb_gpu_t g LEFT JOIN cb_hour_charge_t c ON c.hour = g.hour AND c.gpu_uuid = g.gpu_uuid
    GROUP BY ALL
), e AS (
    SELECT cluster, node, gpu_uuid, model, sum(energy_mj)::HUGEINT AS energy_mj_slices
    FROM cb_detail_t GROUP BY ALL
)
SELECT g.*, greatest(g.energy_mj - coalesce(e.energy_mj_slices, 0), 0)::HUGEINT AS idle_energy_mj
FROM g LEFT JOIN e USING (cluster, node, gpu_uuid, model)
ORDER BY cluster, node, gpu_uuid, model;

-- GPU-hours that break the invariant before any money is rounded: slices that paid more
-- than the hour cost.
CREATE OR REPLACE TEMP MACRO cb_hour_overpaid() AS TABLE
SELECT g.gpu_uuid, g.hour, 'slices paid ' || c.charged_raw::VARCHAR || ' raw of a GPU-hour costing '
       || g.cost_raw::VARCHAR AS problem
FROM cb_gpu_t g JOIN cb_hour_charge_t c ON c.hour = g.hour AND c.gpu_uuid = g.gpu_uuid
WHERE c.charged_raw > g.cost_raw OR c.billed_u > g.cap_u
ORDER BY 1, 2;

-- Slice-hours that found no priced GPU-hour or were not all billed (they would vanish).
-- The caller runs it only when the counts differ (it reads every slice-hour again).
CREATE OR REPLACE TEMP MACRO cb_hour_unbilled(m_start, m_end, src_asof) AS TABLE
SELECT s.gpu_uuid, s.hour,
       CASE WHEN c.slice_rows IS NULL THEN s.n::VARCHAR || ' slice-hours without a priced GPU-hour'
            ELSE 'billed ' || c.slice_rows::VARCHAR || ' of ' || s.n::VARCHAR || ' slice-hours' END AS problem
FROM (SELECT gpu_uuid, hour, count(*) AS n FROM cb_slice_src(m_start, m_end, src_asof) GROUP BY ALL) s
LEFT JOIN cb_hour_charge_t c ON c.hour = s.hour AND c.gpu_uuid = s.gpu_uuid
WHERE c.slice_rows IS DISTINCT FROM s.n
ORDER BY 1, 2;

-- Per GPU and hour of the month, the hours not fully metered by NVML, and why:
-- "no samples" (nothing saw the GPU), "NVML down" (its slices reported without GPU
-- samples for some or all of the hour), "partial" (part of the hour had no sample at all).
-- A GPU is listed from the month's first to its last hour once any sample saw it in the
-- month; an hour without samples carries the GPU's last placement before it (else the next).
CREATE OR REPLACE TEMP MACRO cb_unmetered_hours(m_start, m_end) AS TABLE
WITH seen AS (
    SELECT gpu_uuid, hour, cluster, node, model,
           lag(hour) OVER w IS NULL AS first_seen, coalesce(lead(hour) OVER w, m_end::TIMESTAMP) AS next_hour
    FROM cb_hour_t WINDOW w AS (PARTITION BY gpu_uuid ORDER BY hour)
), gaps AS (
    -- the hours without samples are the gaps between the hours seen: after a seen hour
    -- (up to the next, or the month's end) at its placement, before the first one at that one's
    SELECT gpu_uuid, cluster, node, model, hour + INTERVAL 1 HOUR AS gap_start, next_hour AS gap_end
    FROM seen WHERE next_hour > hour + INTERVAL 1 HOUR
    UNION ALL
    SELECT gpu_uuid, cluster, node, model, m_start::TIMESTAMP, hour FROM seen WHERE first_seen AND hour > m_start::TIMESTAMP
), placed AS (
    SELECT gpu_uuid, unnest(generate_series(gap_start, gap_end - INTERVAL 1 HOUR, INTERVAL 1 HOUR)) AS hour,
           cluster, node, model
    FROM gaps
)
SELECT hour, cluster, node, gpu_uuid, coalesce(model, '') AS model, 0.0::DOUBLE AS metered_s,
       0.0::DOUBLE AS gpu_metered_s, 3600.0::DOUBLE AS unmetered_s, 'no samples' AS reason
FROM placed
UNION ALL
SELECT hour, cluster, node, gpu_uuid, coalesce(model, ''), metered_s, gpu_metered_s, 3600.0 - metered_s,
       concat_ws(', ', CASE WHEN gpu_metered_s < metered_s THEN 'NVML down' END,
                       CASE WHEN metered_s < 3600.0 THEN 'partial' END)
FROM cb_hour_t
WHERE gpu_metered_s < metered_s OR metered_s < 3600.0
ORDER BY gpu_uuid, hour;

-- Per GPU and month: hours seen, metered and unmetered hours (cb_hour_t), at the GPU's
-- latest placement of the month.
CREATE OR REPLACE TEMP MACRO cb_unmetered(m_start, m_end) AS TABLE
WITH g AS (
    SELECT arg_max(cluster, hour) AS cluster, arg_max(node, hour) AS node, gpu_uuid,
           coalesce(arg_max(model, hour), '') AS model,
           count(*) AS hours_with_samples,
           sum(metered_s) / 3600.0 AS metered_hours,
           sum(metered_s - gpu_metered_s) / 3600.0 AS nvml_down_hours
    FROM cb_hour_t
    GROUP BY gpu_uuid
)
SELECT *, epoch(m_end::TIMESTAMP - m_start::TIMESTAMP) / 3600.0 - metered_hours AS unmetered_hours
FROM g
ORDER BY cluster, node, gpu_uuid;

-- Fingerprint of a month's billing inputs (live when src_asof is NULL, else a frozen
-- copy): equal fingerprints = nothing new to correct. Order-independent (a sum of hashes).
CREATE OR REPLACE TEMP MACRO cb_fingerprint(m_start, m_end, src_asof) AS TABLE
SELECT (SELECT count(*) FROM cb_gpu_src(m_start, m_end, src_asof)) AS gpu_rows,
       (SELECT coalesce(sum(hash(hour, cluster, node, gpu_uuid, model, metered_s, energy_joules)::HUGEINT), 0)
          FROM cb_gpu_src(m_start, m_end, src_asof)) AS gpu_hash,
       (SELECT count(*) FROM cb_slice_src(m_start, m_end, src_asof)) AS slice_rows,
       (SELECT coalesce(sum(hash(tenant, hour, cluster, node, gpu_uuid, namespace, pod, pod_uid, container,
                                 whole_gpu, metered_s, alloc_mem_share_s, alloc_cores_share_s,
                                 alloc_dominant_share_s, usage_share_s, hami_nvml_disagree_s)::HUGEINT), 0)
          FROM cb_slice_src(m_start, m_end, src_asof)) AS slice_hash;
