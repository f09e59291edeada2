-- What the GPUs page's filters offer: the month's GPUs of this request's scope, one row per
-- (tenant, node, model, driver, cluster), in natural order. The cluster lets the page price
-- each GPU from the catalog (a price may be set per node or per cluster).
SELECT DISTINCT tenant, node, model, coalesce(driver, 'device plugin') AS driver, cluster
FROM gpu_days_tenant($start, $end)
ORDER BY natural_key(node), model, driver;
