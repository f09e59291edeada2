-- Each GPU-day's last ECC readings (the latest of its hours' last readings, with their
-- sample times): the readers' refresh looks up a GPU's reading before the first day it
-- recomputes here, in about 30 rows per GPU a month, instead of in every GPU-hour held
-- (sql/ingest/reader_ecc_before.sql).
ALTER TABLE reader_gpu_day ADD COLUMN IF NOT EXISTS ecc_agg_last BIGINT;
ALTER TABLE reader_gpu_day ADD COLUMN IF NOT EXISTS ecc_agg_last_ts_ms BIGINT;
ALTER TABLE reader_gpu_day ADD COLUMN IF NOT EXISTS ecc_vol_last BIGINT;
ALTER TABLE reader_gpu_day ADD COLUMN IF NOT EXISTS ecc_vol_last_ts_ms BIGINT;
