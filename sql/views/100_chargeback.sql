-- Chargeback (ARCHITECTURE.md "Chargeback semantics"; docs/chargeback.md).
-- Inputs of every macro: [m_start, m_end) the month's hours, src_asof NULL for the live
-- rollups or the as_of of a frozen copy, share_kind dominant|memory|cores,
-- basis allocation|usage|max. The caller fills TEMP TABLE cb_price(cluster, node, model,
-- price_micro) from the price catalog first (integer micro-units of currency per GPU-hour).
--
-- Money is exact integer arithmetic: a share is floored to integer micro-GPU-seconds
-- (so the shares on a GPU-hour can never add above its metered seconds) and a charge is
-- price_micro x micro-seconds as HUGEINT ("raw units"; 1 currency unit per GPU-hour =
-- 3.6e15 raw). Python turns raw sums into cents (ingest/money.py).

-- Working tables the caller fills per computation (TEMP: per connection, also on
-- read-only connections). Declared here because macros bind their tables when created.
CREATE TEMP TABLE IF NOT EXISTS cb_price (cluster VARCHAR, node VARCHAR, model VARCHAR, price_micro BIGINT);
CREATE TEMP TABLE IF NOT EXISTS cb_detail_t (
    tenant VARCHAR, namespace VARCHAR, pod VARCHAR, pod_uid VARCHAR, container VARCHAR,
    cluster VARCHAR, node VARCHAR, gpu_uuid VARCHAR, model VARCHAR, price_micro BIGINT,
    alloc_u HUGEINT, used_u HUGEINT, billed_u HUGEINT, charge_raw HUGEINT, waste_raw HUGEINT,
    energy_mj HUGEINT, slice_hours BIGINT
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

-- Priced GPU-hours: capacity (metered seconds, at most 3600) and its cost in raw units.
CREATE OR REPLACE TEMP MACRO cb_gpu_calc(m_start, m_end, src_asof) AS TABLE
SELECT g.hour, g.cluster, g.node, g.gpu_uuid, g.model, p.price_micro,
       round(least(greatest(g.metered_s, 0), 3600.0) * 1e6)::BIGINT AS cap_u,
       p.price_micro::HUGEINT * round(least(greatest(g.metered_s, 0), 3600.0) * 1e6)::BIGINT AS cost_raw,
       round(greatest(coalesce(g.energy_joules, 0), 0) * 1000)::BIGINT AS energy_mj
FROM cb_gpu_src(m_start, m_end, src_asof) g
JOIN cb_price p ON p.cluster = g.cluster AND p.node = g.node AND p.model IS NOT DISTINCT FROM g.model;

-- Every slice-hour priced: shares scaled down where a GPU-hour is oversubscribed.
-- Shares become integer micro-GPU-seconds first, so totals and the scaling (integer floor
-- division) are exact and independent of the order DuckDB sums in: the same database
-- always gives the same bill, and the shares on a GPU-hour never add above its capacity.
-- GPU-hours are joined on one integer key (hour number x 2^22 + a dense GPU id): string
-- keys made the big joins several times slower at fleet scale (bench/bench_export.py).
CREATE OR REPLACE TEMP MACRO cb_calc(m_start, m_end, src_asof, share_kind, basis) AS TABLE
WITH ids AS (
    SELECT gpu_uuid, row_number() OVER (ORDER BY gpu_uuid)::BIGINT AS gid
    FROM (SELECT DISTINCT gpu_uuid FROM cb_gpu_src(m_start, m_end, src_asof))
), g AS (
    SELECT (epoch_ms(c.hour) // 3600000) * 4194304 + ids.gid AS k, ids.gid, c.price_micro, c.cap_u, c.energy_mj
    FROM cb_gpu_calc(m_start, m_end, src_asof) c JOIN ids USING (gpu_uuid)
), s AS NOT MATERIALIZED (
    SELECT (epoch_ms(x.hour) // 3600000) * 4194304 + ids.gid AS k, ids.gid,
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
    SELECT b.gid, b.tenant, b.namespace, b.pod, b.pod_uid, b.container, gt.price_micro, gt.cap_u, gt.energy_mj,
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

-- Per slice and month: the bill's detail lines before the idle policy. A GPU's cluster,
-- node and model come from its GPU-hours (the smallest if it moved; charges are per hour
-- at that hour's price either way).
CREATE OR REPLACE TEMP MACRO cb_detail(m_start, m_end, src_asof, share_kind, basis) AS TABLE
WITH d1 AS (
    -- integer sums per price first; charges (price x share) are multiplied out on the
    -- aggregated rows, not on every slice-hour
    SELECT gid, tenant, namespace, pod, pod_uid, container, price_micro,
           sum(a_u) AS alloc_u, sum(u_u) AS used_u, sum(b_u) AS billed_u, sum(waste_u) AS waste_u,
           sum(energy_mj_slice) AS energy_mj, count(*) AS slice_hours
    FROM cb_calc(m_start, m_end, src_asof, share_kind, basis)
    GROUP BY gid, tenant, namespace, pod, pod_uid, container, price_micro
), d AS (
    SELECT gid, tenant, namespace, pod, pod_uid, container, max(price_micro) AS price_micro,
           sum(alloc_u)::HUGEINT AS alloc_u, sum(used_u)::HUGEINT AS used_u, sum(billed_u)::HUGEINT AS billed_u,
           sum(price_micro::HUGEINT * billed_u)::HUGEINT AS charge_raw,
           sum(price_micro::HUGEINT * waste_u)::HUGEINT AS waste_raw,
           sum(energy_mj)::HUGEINT AS energy_mj, sum(slice_hours)::BIGINT AS slice_hours
    FROM d1
    GROUP BY gid, tenant, namespace, pod, pod_uid, container
), ids AS (
    SELECT row_number() OVER (ORDER BY gpu_uuid)::BIGINT AS gid, gpu_uuid, cluster, node, model
    FROM (SELECT gpu_uuid, min(cluster) AS cluster, min(node) AS node, min(model) AS model
          FROM cb_gpu_src(m_start, m_end, src_asof) GROUP BY gpu_uuid)
)
SELECT d.tenant, coalesce(d.namespace, '') AS namespace, coalesce(d.pod, '') AS pod, d.pod_uid, d.container,
       ids.cluster, ids.node, ids.gpu_uuid, coalesce(ids.model, '') AS model, d.price_micro,
       d.alloc_u, d.used_u, d.billed_u, d.charge_raw, d.waste_raw, d.energy_mj, d.slice_hours
FROM d JOIN ids USING (gid);

-- Per GPU and month: capacity, cost, what the slices paid, idle (capacity nobody paid for).
-- Reads TEMP TABLE cb_detail_t, which the caller fills from cb_detail(...) first.
CREATE OR REPLACE TEMP MACRO cb_gpu_agg(m_start, m_end, src_asof) AS TABLE
WITH g AS (
    SELECT cluster, node, gpu_uuid, coalesce(model, '') AS model, any_value(price_micro) AS price_micro,
           sum(cap_u)::HUGEINT AS metered_u, sum(cost_raw)::HUGEINT AS cost_raw, sum(energy_mj)::HUGEINT AS energy_mj,
           count(*) AS gpu_hours_seen
    FROM cb_gpu_calc(m_start, m_end, src_asof)
    GROUP BY ALL
), c AS (
    SELECT gpu_uuid, sum(charge_raw)::HUGEINT AS charged_raw, sum(billed_u)::HUGEINT AS billed_u,
           sum(energy_mj)::HUGEINT AS energy_mj_slices
    FROM cb_detail_t GROUP BY gpu_uuid
)
SELECT g.*, coalesce(c.charged_raw, 0)::HUGEINT AS charged_raw,
       (g.cost_raw - coalesce(c.charged_raw, 0))::HUGEINT AS idle_raw,
       (g.metered_u - coalesce(c.billed_u, 0))::HUGEINT AS idle_u,
       greatest(g.energy_mj - coalesce(c.energy_mj_slices, 0), 0)::HUGEINT AS idle_energy_mj
FROM g LEFT JOIN c USING (gpu_uuid)
ORDER BY cluster, node, gpu_uuid;

-- Unmetered time: for each GPU known in the month, the seconds of the month without
-- samples (hours with metered_s < 3600 and hours with no row at all).
CREATE OR REPLACE TEMP MACRO cb_unmetered(m_start, m_end, src_asof) AS TABLE
SELECT cluster, node, gpu_uuid, coalesce(any_value(model), '') AS model,
       count(*) AS hours_with_samples,
       sum(least(metered_s, 3600.0)) / 3600.0 AS metered_hours,
       epoch(m_end::TIMESTAMP - m_start::TIMESTAMP) / 3600.0 - sum(least(metered_s, 3600.0)) / 3600.0 AS unmetered_hours
FROM cb_gpu_src(m_start, m_end, src_asof)
GROUP BY cluster, node, gpu_uuid
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
