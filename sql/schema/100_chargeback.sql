-- Chargeback: closed (frozen) months.
-- Closing a month copies the rollups it was billed from (with the tenant attribution of
-- that moment) and the price catalog text, so a closed month's files can be regenerated
-- byte for byte forever, whatever arrives or changes later. Data that arrives later for
-- a closed month is found by comparing live rows with the latest frozen copy and billed
-- as Correction rows in the next open month (docs/chargeback.md).

CREATE TABLE IF NOT EXISTS closed_months (
    month         DATE      PRIMARY KEY,   -- first day of the month
    closed_at     TIMESTAMP NOT NULL,
    prices_yaml   VARCHAR   NOT NULL,      -- the catalog the month was closed with
    prices_sha    VARCHAR   NOT NULL
);

-- as_of = the invoice month whose close froze this copy of month `data_month`'s rows:
-- the month itself when it closed, and each later month whose close carried corrections
-- for it. The latest as_of <= M is what M's invoice has already billed.
-- A frozen table holds the columns a bill reads, typed by the source table itself (the
-- tenant column by the catalog's): a change of type there reaches the frozen copy.
CREATE TABLE frozen_gpu_hour AS
SELECT NULL::DATE AS as_of, NULL::DATE AS data_month, hour, cluster, node, gpu_uuid, model, metered_s, energy_joules
FROM gpu_hour WITH NO DATA;
ALTER TABLE frozen_gpu_hour ADD PRIMARY KEY (as_of, hour, gpu_uuid);
ALTER TABLE frozen_gpu_hour ALTER COLUMN data_month SET NOT NULL;

CREATE TABLE frozen_slice_hour AS
SELECT NULL::DATE AS as_of, NULL::DATE AS data_month, t.tenant, hour, cluster, node, gpu_uuid, namespace, pod,
       pod_uid, container, whole_gpu, metered_s, alloc_mem_share_s, alloc_cores_share_s, alloc_dominant_share_s,
       usage_share_s, hami_nvml_disagree_s
FROM slice_hour, tenants t WITH NO DATA;
ALTER TABLE frozen_slice_hour ADD PRIMARY KEY (as_of, hour, gpu_uuid, pod_uid, container);
ALTER TABLE frozen_slice_hour ALTER COLUMN data_month SET NOT NULL;
ALTER TABLE frozen_slice_hour ALTER COLUMN tenant SET NOT NULL;
