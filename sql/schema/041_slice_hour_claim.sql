-- A DRA slice's claim and driver in the hourly rollups (docs/dra.md), and the driver that
-- published a GPU: what the dashboard lists beside a slice. NULL: the device plugin's.
ALTER TABLE slice_hour ADD COLUMN IF NOT EXISTS claim VARCHAR;
ALTER TABLE slice_hour ADD COLUMN IF NOT EXISTS driver VARCHAR;
ALTER TABLE gpu_hour ADD COLUMN IF NOT EXISTS driver VARCHAR;
