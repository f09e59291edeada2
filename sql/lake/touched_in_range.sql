-- The GPU-hours of [$start, $end) with rollup deltas, whose money chargeback.kept.keep_hours
-- keeps again on a lake (sql/lake/keep_money.sql).
CREATE OR REPLACE TEMP TABLE lake_touched_ids AS
SELECT hour, gpu_uuid_id FROM lake.main.gpu_hour_pending WHERE hour >= $start::TIMESTAMP AND hour < $end::TIMESTAMP
UNION
SELECT hour, gpu_uuid_id FROM lake.main.slice_hour_pending WHERE hour >= $start::TIMESTAMP AND hour < $end::TIMESTAMP;
