-- Tick 1.2's columns in the raw rows, kept as sent (docs/wire-format.md): a DRA slice's claim,
-- driver and allocation shares (docs/dra.md), a DRA device's driver, and each GPU's health
-- (docs/health.md). Strings are ids into ingest_strings, as every dictionary column. NULL:
-- an older exporter, or a figure the board does not report.
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS driver_id INTEGER;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS temperature_celsius FLOAT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS memory_temperature_celsius FLOAT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS fan_speed_ratio FLOAT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS ecc_corrected_volatile BIGINT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS ecc_uncorrected_volatile BIGINT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS ecc_corrected_aggregate BIGINT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS ecc_uncorrected_aggregate BIGINT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS retired_pages_pending BOOLEAN;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS remapped_rows_pending BOOLEAN;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS remapped_rows_failed BOOLEAN;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS pcie_replay_total BIGINT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS clock_event_reasons BIGINT;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS power_violation_seconds_total DOUBLE;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS thermal_violation_seconds_total DOUBLE;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS xid_events INTEGER;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS xid_last_code INTEGER;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS xid_critical_code INTEGER;
ALTER TABLE raw_gpu_rows ADD COLUMN IF NOT EXISTS gpu_lost BOOLEAN;
ALTER TABLE raw_slice_rows ADD COLUMN IF NOT EXISTS claim_id INTEGER;
ALTER TABLE raw_slice_rows ADD COLUMN IF NOT EXISTS claim_uid_id INTEGER;
ALTER TABLE raw_slice_rows ADD COLUMN IF NOT EXISTS driver_id INTEGER;
ALTER TABLE raw_slice_rows ADD COLUMN IF NOT EXISTS alloc_mem_share_ratio DOUBLE;
ALTER TABLE raw_slice_rows ADD COLUMN IF NOT EXISTS alloc_cores_share_ratio DOUBLE;
ALTER TABLE raw_slice_tail ADD COLUMN IF NOT EXISTS claim_id INTEGER;
ALTER TABLE raw_slice_tail ADD COLUMN IF NOT EXISTS claim_uid_id INTEGER;
ALTER TABLE raw_slice_tail ADD COLUMN IF NOT EXISTS driver_id INTEGER;
ALTER TABLE raw_slice_tail ADD COLUMN IF NOT EXISTS alloc_mem_share_ratio DOUBLE;
ALTER TABLE raw_slice_tail ADD COLUMN IF NOT EXISTS alloc_cores_share_ratio DOUBLE;
