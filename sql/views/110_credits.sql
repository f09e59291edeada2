-- Credits for degraded GPU-hours (docs/health.md, In the bill), run only when the price
-- catalog has a credit policy. Inputs as sql/views/100_chargeback.sql's macros, after
-- bill.month_lines filled its working tables; throttled_share from the catalog.

-- The month's degraded GPU-hours (cb_gpu_id_t's ids), from the live health or the frozen copy
-- of a closed month (sql/chargeback/freeze.sql).
CREATE TEMP TABLE IF NOT EXISTS cb_degraded_t (hour TIMESTAMP, gid INTEGER);

CREATE OR REPLACE TEMP MACRO cb_degraded_src(m_start, m_end, src_asof, throttled_share) AS TABLE
SELECT d.hour, i.gid
FROM (SELECT hour, gpu_uuid FROM gpu_health_degraded(m_start, m_end, throttled_share)
      WHERE src_asof IS NULL AND degraded
      UNION ALL
      SELECT hour, gpu_uuid FROM frozen_gpu_health
      WHERE as_of = src_asof AND hour >= m_start::TIMESTAMP AND hour < m_end::TIMESTAMP
        AND health_degraded(xid_critical_count, ecc_uncorrected_increase, lost_s, throttled_s, unhealthy_s,
                            throttled_share)) d
JOIN cb_gpu_id_t i USING (gpu_uuid);

-- Per slice line (slice and placement): the micro-seconds it was billed on degraded
-- GPU-hours in a span of hours (the caller adds the spans up).
CREATE OR REPLACE TEMP MACRO cb_credit_sums(m_start, m_end, src_asof, share_kind, basis) AS TABLE
SELECT c.pid, c.tenant, c.namespace, c.pod, c.pod_uid, c.container, c.price_micro, sum(c.b_u)::HUGEINT AS degraded_u
FROM cb_calc(m_start, m_end, src_asof, share_kind, basis) c
SEMI JOIN cb_degraded_t d ON d.hour = c.hour AND d.gid = c.gid
GROUP BY ALL;

-- Per placement: what its slices were billed on its degraded GPU-hours, summed from the
-- GPU-hours (cb_hour_billed), independently of the slice lines.
CREATE OR REPLACE TEMP MACRO cb_gpu_degraded() AS TABLE
SELECT p.cluster, p.node, p.gpu_uuid, coalesce(p.model, '') AS model, sum(b.billed_u)::HUGEINT AS degraded_u
FROM cb_hour_billed() b SEMI JOIN cb_degraded_t d ON d.hour = b.hour AND d.gid = b.gid
JOIN cb_place_t p ON p.pid = b.pid
GROUP BY ALL;
