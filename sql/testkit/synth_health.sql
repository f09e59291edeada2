-- Health events in a generated month (sql/testkit/synth_month.sql), as ingest would roll
-- them up, so the GPUs page's health filters and the Problems page have something to find
-- at any fleet size. Deterministic from hash(gpu, $seed), on GPU-hours that were metered:
--   1 GPU in 400: Xid 79 (fallen off the bus, critical) in one hour of the month's 12th day;
--   1 GPU in 250: throttled for 40 minutes of one hour of its 20th day (degraded at the
--                 default 25 %), with 2 non-critical Xid events.
-- Idempotent: running it again sets the same values.
UPDATE gpu_hour SET xid_events = 1, xid_critical_count = 1, xid_critical_code = 79,
                    xid_critical_ts_ms = epoch_ms(hour) + 600000
WHERE hour = $m_start::TIMESTAMP + INTERVAL 11 DAY + to_hours((hash(gpu_uuid, $seed) // 400 % 24)::BIGINT)
  AND hash(gpu_uuid, $seed) % 400 = 0;

UPDATE gpu_hour SET throttled_s = 2400, xid_events = 2
WHERE hour = $m_start::TIMESTAMP + INTERVAL 19 DAY + to_hours((hash(gpu_uuid, $seed) // 250 % 24)::BIGINT)
  AND hash(gpu_uuid, $seed) % 250 = 1;
