-- GPU health per GPU-hour (docs/health.md, In the bill), over the health columns of gpu_hour
-- (sql/schema/050_gpu_health_hour.sql).

-- Uncorrectable ECC errors an hour added: its largest reading above its first (an increase
-- within the hour; a volatile counter's reset only lowers it), plus its first reading above
-- the previous reading's last one (an increase across the boundary; below it is a reset).
CREATE OR REPLACE TEMP MACRO ecc_hour_increase(first_v, max_v, prev_last) AS
    greatest(coalesce(max_v - first_v, 0), 0) + greatest(coalesce(first_v - prev_last, 0), 0);

-- A degraded GPU-hour: a critical Xid, an uncorrectable ECC error, lost (fell off the bus),
-- reported Unhealthy by Kubernetes for any second (sql/schema/110_device_health.sql: any
-- vendor's device), or throttled for more than `throttled_share` of the hour (the price
-- catalog's `degraded: {throttled_share}`, 0.25 unless set). Unknown health is not degraded.
CREATE OR REPLACE TEMP MACRO health_degraded(xid_critical_count, ecc_increase, lost_s, throttled_s, unhealthy_s,
                                             throttled_share) AS
    coalesce(xid_critical_count, 0) > 0 OR coalesce(ecc_increase, 0) > 0 OR coalesce(lost_s, 0) > 0
    OR coalesce(unhealthy_s, 0) > 0 OR coalesce(throttled_s, 0) > throttled_share::DOUBLE * 3600.0;

-- Each GPU's last ECC readings before h_start (the readers' refresh reads them from its
-- day figures instead: sql/ingest/reader_ecc_before.sql).
CREATE OR REPLACE TEMP MACRO ecc_before(h_start) AS TABLE
SELECT gpu_uuid, arg_max(ecc_agg_last, ecc_agg_last_ts_ms) AS agg_last,
       arg_max(ecc_vol_last, ecc_vol_last_ts_ms) AS vol_last
FROM gpu_hour WHERE hour < h_start::TIMESTAMP GROUP BY gpu_uuid;

-- Each GPU-hour of [h_start, h_end) with its health. The aggregate ECC counter survives
-- reboots and is read where the board reports it, else the volatile one; the previous
-- reading may lie before h_start.
CREATE OR REPLACE TEMP MACRO gpu_health(h_start, h_end) AS TABLE
WITH h AS (
    SELECT g.*, coalesce(lag(g.ecc_agg_last IGNORE NULLS) OVER w, e.agg_last) AS prev_agg,
           coalesce(lag(g.ecc_vol_last IGNORE NULLS) OVER w, e.vol_last) AS prev_vol
    FROM gpu_hour g LEFT JOIN ecc_before(h_start) e USING (gpu_uuid)
    WHERE g.hour >= h_start::TIMESTAMP AND g.hour < h_end::TIMESTAMP
    WINDOW w AS (PARTITION BY g.gpu_uuid ORDER BY g.hour)
)
SELECT hour, gpu_uuid, cluster, node, model, metered_s, coalesce(xid_events, 0) AS xid_events,
       coalesce(xid_critical_count, 0) AS xid_critical_count, xid_critical_code,
       CASE WHEN ecc_agg_max IS NOT NULL THEN ecc_hour_increase(ecc_agg_first, ecc_agg_max, prev_agg)
            ELSE coalesce(ecc_hour_increase(ecc_vol_first, ecc_vol_max, prev_vol), 0) END AS ecc_uncorrected_increase,
       coalesce(throttled_s, 0) AS throttled_s, coalesce(lost_s, 0) AS lost_s, temperature_max_celsius,
       coalesce(unhealthy_s, 0) AS unhealthy_s, coalesce(health_unknown_s, 0) AS health_unknown_s
FROM h;

-- What happened in a GPU-hour, in words ('' where nothing did).
CREATE OR REPLACE TEMP MACRO health_what(xid_critical_count, xid_critical_code, xid_events, ecc_uncorrected_increase,
                                         throttled_s, lost_s, unhealthy_s, health_unknown_s) AS
    concat_ws('; ',
        CASE WHEN xid_critical_count > 0 THEN 'Xid ' || xid_critical_code || ' (critical)' END,
        CASE WHEN xid_events > 0 THEN xid_events || ' Xid events' END,
        CASE WHEN ecc_uncorrected_increase > 0 THEN ecc_uncorrected_increase || ' uncorrectable ECC errors' END,
        CASE WHEN throttled_s > 0 THEN 'throttled ' || round(throttled_s)::BIGINT || ' s' END,
        CASE WHEN lost_s > 0 THEN 'lost ' || round(lost_s)::BIGINT || ' s' END,
        CASE WHEN unhealthy_s > 0 THEN 'Unhealthy ' || round(unhealthy_s)::BIGINT || ' s' END,
        CASE WHEN health_unknown_s > 0 THEN 'health Unknown ' || round(health_unknown_s)::BIGINT || ' s' END);

-- gpu_health with whether each hour was degraded and what happened, in words.
CREATE OR REPLACE TEMP MACRO gpu_health_degraded(h_start, h_end, throttled_share) AS TABLE
SELECT *, health_degraded(xid_critical_count, ecc_uncorrected_increase, lost_s, throttled_s, unhealthy_s,
                          throttled_share) AS degraded,
       health_what(xid_critical_count, xid_critical_code, xid_events, ecc_uncorrected_increase, throttled_s, lost_s,
                   unhealthy_s, health_unknown_s) AS what
FROM gpu_health(h_start, h_end);

-- The GPU-hours of [h_start, h_end) with something to say (a degraded hour is one of them,
-- whatever the throttled share), and the slice-hours on them with their tenants. A readers'
-- file keeps both (sql/schema/090_reader_days.sql); sql/views/reader_days.sql reads them.
CREATE OR REPLACE TEMP MACRO gpu_health_noted_of_hours(h_start, h_end) AS TABLE
SELECT * FROM gpu_health(h_start, h_end)
WHERE xid_events > 0 OR xid_critical_count > 0 OR ecc_uncorrected_increase > 0 OR throttled_s > 0 OR lost_s > 0
   OR unhealthy_s > 0 OR health_unknown_s > 0;

CREATE OR REPLACE TEMP MACRO gpu_health_noted(h_start, h_end) AS TABLE
SELECT * FROM gpu_health_noted_of_hours(h_start, h_end);

-- The slice-hours on the noted GPU-hours of table `noted` (a readers' file's, just computed).
CREATE OR REPLACE TEMP MACRO slices_on_noted_in(h_start, h_end, noted) AS TABLE
SELECT s.hour, s.gpu_uuid, s.cluster, s.namespace, s.pod, s.pod_uid, s.container, s.alloc_dominant_share_s
FROM slice_hour s SEMI JOIN query_table(noted) n ON n.hour = s.hour AND n.gpu_uuid = s.gpu_uuid
WHERE s.hour >= h_start::TIMESTAMP AND s.hour < h_end::TIMESTAMP;

-- From the hours: every slice-hour of the range (its readers join it with the noted GPU-hours).
CREATE OR REPLACE TEMP MACRO slices_on_noted_of_hours(h_start, h_end) AS TABLE
SELECT hour, gpu_uuid, cluster, namespace, pod, pod_uid, container, alloc_dominant_share_s
FROM slice_hour WHERE hour >= h_start::TIMESTAMP AND hour < h_end::TIMESTAMP;

CREATE OR REPLACE TEMP MACRO slices_on_noted(h_start, h_end) AS TABLE
SELECT * FROM slices_on_noted_of_hours(h_start, h_end);

CREATE OR REPLACE TEMP MACRO slices_on_noted_tenant(h_start, h_end) AS TABLE
SELECT coalesce(o.tenant, ct.tenant, 'unassigned') AS tenant, s.*
FROM slices_on_noted(h_start, h_end) s
LEFT JOIN cluster_namespace_override o ON o.cluster = s.cluster AND o.namespace = s.namespace
LEFT JOIN cluster_tenant ct ON ct.cluster = s.cluster;

-- The GPU-hours of [h_start, h_end) with something wrong: the health events.
CREATE OR REPLACE TEMP MACRO gpu_health_events(h_start, h_end, throttled_share) AS TABLE
SELECT *, health_degraded(xid_critical_count, ecc_uncorrected_increase, lost_s, throttled_s, unhealthy_s,
                          throttled_share) AS degraded,
       health_what(xid_critical_count, xid_critical_code, xid_events, ecc_uncorrected_increase, throttled_s, lost_s,
                   unhealthy_s, health_unknown_s) AS what
FROM gpu_health_noted(h_start, h_end);

-- Each slice-hour of [h_start, h_end) with its tenant and whether its GPU-hour was degraded.
CREATE OR REPLACE TEMP MACRO slice_hour_health(h_start, h_end, throttled_share) AS TABLE
SELECT s.*, coalesce(d.degraded, false) AS gpu_degraded
FROM slice_hour_tenant s
LEFT JOIN gpu_health_degraded(h_start, h_end, throttled_share) d ON d.hour = s.hour AND d.gpu_uuid = s.gpu_uuid
WHERE s.hour >= h_start::TIMESTAMP AND s.hour < h_end::TIMESTAMP;

-- Per tenant: its allocation GPU-hours on degraded GPU-hours (dominant share), and how
-- many degraded GPU-hours its slices sat on (a degraded hour is a noted one).
CREATE OR REPLACE TEMP MACRO tenant_degraded_hours(h_start, h_end, throttled_share) AS TABLE
SELECT s.tenant, sum(s.alloc_dominant_share_s) / 3600.0 AS degraded_gpu_hours,
       count(DISTINCT (s.hour, s.gpu_uuid)) AS degraded_gpu_hours_touched
FROM slices_on_noted_tenant(h_start, h_end) s
JOIN gpu_health_events(h_start, h_end, throttled_share) e ON e.hour = s.hour AND e.gpu_uuid = s.gpu_uuid
WHERE e.degraded
GROUP BY s.tenant;
