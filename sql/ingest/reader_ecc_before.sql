-- The readers' refresh (store/reader_file.py) on its own cursor: each GPU's last ECC readings
-- before h_start, a day's start, from the day figures of the file being written (its GPU-days
-- before the first day the refresh recomputes are current; reader_gpu_day is written before the
-- health events), in place of sql/views/012_health.sql's look-up over every GPU-hour held.
CREATE OR REPLACE TEMP MACRO ecc_before(h_start) AS TABLE
SELECT gpu_uuid, arg_max(ecc_agg_last, ecc_agg_last_ts_ms) AS agg_last,
       arg_max(ecc_vol_last, ecc_vol_last_ts_ms) AS vol_last
FROM slicemeter_reader_next.main.reader_gpu_day
WHERE day < h_start::TIMESTAMP
GROUP BY gpu_uuid;
