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
CREATE OR REPLACE TEMP MACRO cb_calc(m_start, m_end, src_asof, share_kind, basis) AS TABLE
WITH s AS (
    SELECT tenant, hour, gpu_uuid, namespace, pod, pod_uid, container, hami_nvml_disagree_s,
           round(greatest(CASE share_kind WHEN 'memory' THEN alloc_mem_share_s
                                          WHEN 'cores'  THEN alloc_cores_share_s
                                          ELSE alloc_dominant_share_s END, 0) * 1e6)::BIGINT AS a_i,
           round(greatest(usage_share_s, 0) * 1e6)::BIGINT AS u_i
    FROM cb_slice_src(m_start, m_end, src_asof)
), b AS (
    SELECT *, CASE basis WHEN 'usage' THEN u_i WHEN 'max' THEN greatest(a_i, u_i) ELSE a_i END AS b_i
    FROM s
), tot AS (
    SELECT hour, gpu_uuid, sum(a_i)::HUGEINT AS a_tot, sum(u_i)::HUGEINT AS u_tot, sum(b_i)::HUGEINT AS b_tot
    FROM b GROUP BY hour, gpu_uuid
), scaled AS (
    SELECT b.tenant, b.namespace, b.pod, b.pod_uid, b.container, b.hami_nvml_disagree_s,
           g.hour, g.cluster, g.node, g.gpu_uuid, g.model, g.price_micro, g.cap_u, g.energy_mj,
           (CASE WHEN t.a_tot > g.cap_u THEN (b.a_i::HUGEINT * g.cap_u) // t.a_tot ELSE b.a_i END)::BIGINT AS a_u,
           (CASE WHEN t.u_tot > g.cap_u THEN (b.u_i::HUGEINT * g.cap_u) // t.u_tot ELSE b.u_i END)::BIGINT AS u_u,
           (CASE WHEN t.b_tot > g.cap_u THEN (b.b_i::HUGEINT * g.cap_u) // t.b_tot ELSE b.b_i END)::BIGINT AS b_u,
           CASE WHEN g.cap_u > 0 THEN least(1.0, t.u_tot::DOUBLE / g.cap_u) ELSE 0 END AS busy
    FROM b
    JOIN tot t ON t.hour = b.hour AND t.gpu_uuid = b.gpu_uuid
    JOIN cb_gpu_calc(m_start, m_end, src_asof) g ON g.hour = b.hour AND g.gpu_uuid = b.gpu_uuid
)
SELECT *,
       price_micro::HUGEINT * b_u AS charge_raw,
       price_micro::HUGEINT * greatest(a_u - u_u, 0) AS waste_raw,
       -- energy: the busy part of the hour's energy by usage share, the idle part by
       -- allocation share; what no slice holds stays with the platform. Integer mJ per
       -- row so that sums are exact.
       CASE WHEN cap_u > 0
            THEN round(energy_mj * (u_u::DOUBLE / cap_u) + energy_mj * (1 - busy) * (a_u::DOUBLE / cap_u))
            ELSE 0 END::BIGINT AS energy_mj_slice
FROM scaled;

-- Per slice and month: the bill's detail lines before the idle policy.
CREATE OR REPLACE TEMP MACRO cb_detail(m_start, m_end, src_asof, share_kind, basis) AS TABLE
SELECT tenant, coalesce(namespace, '') AS namespace, coalesce(pod, '') AS pod, pod_uid, container,
       cluster, node, gpu_uuid, coalesce(model, '') AS model, any_value(price_micro) AS price_micro,
       sum(a_u)::HUGEINT AS alloc_u, sum(u_u)::HUGEINT AS used_u, sum(b_u)::HUGEINT AS billed_u,
       sum(charge_raw)::HUGEINT AS charge_raw, sum(waste_raw)::HUGEINT AS waste_raw,
       sum(energy_mj_slice)::HUGEINT AS energy_mj, count(*) AS slice_hours
FROM cb_calc(m_start, m_end, src_asof, share_kind, basis)
GROUP BY ALL;

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
