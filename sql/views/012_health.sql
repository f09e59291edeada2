-- GPU health per GPU-hour (docs/health.md, In the bill), over the health columns of gpu_hour
-- (sql/schema/050_gpu_health_hour.sql).

-- Uncorrectable ECC errors an hour added: its largest reading above its first (an increase
-- within the hour; a volatile counter's reset only lowers it), plus its first reading above
-- the previous reading's last one (an increase across the boundary; below it is a reset).
CREATE OR REPLACE TEMP MACRO ecc_hour_increase(first_v, max_v, prev_last) AS
    greatest(coalesce(max_v - first_v, 0), 0) + greatest(coalesce(first_v - prev_last, 0), 0);

-- A degraded GPU-hour: a critical Xid, an uncorrectable ECC error, lost (fell off the bus),
-- or throttled for more than `throttled_share` of the hour (the price catalog's
-- `degraded: {throttled_share}`, 0.25 unless set).
CREATE OR REPLACE TEMP MACRO health_degraded(xid_critical_count, ecc_increase, lost_s, throttled_s, throttled_share) AS
    coalesce(xid_critical_count, 0) > 0 OR coalesce(ecc_increase, 0) > 0 OR coalesce(lost_s, 0) > 0
    OR coalesce(throttled_s, 0) > throttled_share::DOUBLE * 3600.0;

-- Each GPU-hour of [h_start, h_end) with its health. The aggregate ECC counter survives
-- reboots and is read where the board reports it, else the volatile one; the previous
-- reading may lie before h_start.
CREATE OR REPLACE TEMP MACRO gpu_health(h_start, h_end) AS TABLE
WITH earlier AS (
    SELECT gpu_uuid, arg_max(ecc_agg_last, ecc_agg_last_ts_ms) AS agg_last,
           arg_max(ecc_vol_last, ecc_vol_last_ts_ms) AS vol_last
    FROM gpu_hour WHERE hour < h_start::TIMESTAMP GROUP BY gpu_uuid
), h AS (
    SELECT g.*, coalesce(lag(g.ecc_agg_last IGNORE NULLS) OVER w, e.agg_last) AS prev_agg,
           coalesce(lag(g.ecc_vol_last IGNORE NULLS) OVER w, e.vol_last) AS prev_vol
    FROM gpu_hour g LEFT JOIN earlier e USING (gpu_uuid)
    WHERE g.hour >= h_start::TIMESTAMP AND g.hour < h_end::TIMESTAMP
    WINDOW w AS (PARTITION BY g.gpu_uuid ORDER BY g.hour)
)
SELECT hour, gpu_uuid, cluster, node, model, metered_s, coalesce(xid_events, 0) AS xid_events,
       coalesce(xid_critical_count, 0) AS xid_critical_count, xid_critical_code,
       CASE WHEN ecc_agg_max IS NOT NULL THEN ecc_hour_increase(ecc_agg_first, ecc_agg_max, prev_agg)
            ELSE coalesce(ecc_hour_increase(ecc_vol_first, ecc_vol_max, prev_vol), 0) END AS ecc_uncorrected_increase,
       coalesce(throttled_s, 0) AS throttled_s, coalesce(lost_s, 0) AS lost_s, temperature_max_celsius
FROM h;

-- gpu_health with whether each hour was degraded and what happened, in words.
CREATE OR REPLACE TEMP MACRO gpu_health_degraded(h_start, h_end, throttled_share) AS TABLE
SELECT *, health_degraded(xid_critical_count, ecc_uncorrected_increase, lost_s, throttled_s, throttled_share) AS degraded,
       concat_ws('; ',
           CASE WHEN xid_critical_count > 0 THEN 'Xid ' || xid_critical_code || ' (critical)' END,
           CASE WHEN xid_events > 0 THEN xid_events || ' Xid events' END,
           CASE WHEN ecc_uncorrected_increase > 0 THEN ecc_uncorrected_increase || ' uncorrectable ECC errors' END,
           CASE WHEN throttled_s > 0 THEN 'throttled ' || round(throttled_s)::BIGINT || ' s' END,
           CASE WHEN lost_s > 0 THEN 'lost ' || round(lost_s)::BIGINT || ' s' END) AS what
FROM gpu_health(h_start, h_end);

-- The GPU-hours of [h_start, h_end) with something wrong: the health events.
CREATE OR REPLACE TEMP MACRO gpu_health_events(h_start, h_end, throttled_share) AS TABLE
SELECT * FROM gpu_health_degraded(h_start, h_end, throttled_share) WHERE what <> '';

-- Each slice-hour of [h_start, h_end) with its tenant and whether its GPU-hour was degraded.
CREATE OR REPLACE TEMP MACRO slice_hour_health(h_start, h_end, throttled_share) AS TABLE
SELECT s.*, coalesce(d.degraded, false) AS gpu_degraded
FROM slice_hour_tenant s
LEFT JOIN gpu_health_degraded(h_start, h_end, throttled_share) d ON d.hour = s.hour AND d.gpu_uuid = s.gpu_uuid
WHERE s.hour >= h_start::TIMESTAMP AND s.hour < h_end::TIMESTAMP;

-- Per tenant: its allocation GPU-hours on degraded GPU-hours (dominant share), and how
-- many degraded GPU-hours its slices sat on.
CREATE OR REPLACE TEMP MACRO tenant_degraded_hours(h_start, h_end, throttled_share) AS TABLE
SELECT tenant, sum(alloc_dominant_share_s) / 3600.0 AS degraded_gpu_hours,
       count(DISTINCT (hour, gpu_uuid)) AS degraded_gpu_hours_touched
FROM slice_hour_health(h_start, h_end, throttled_share)
WHERE gpu_degraded
GROUP BY tenant;
