-- A span's slice lines billed on degraded GPU-hours (cb_credit_sums, sql/views/110_credits.sql)
-- named as the detail lines are (cb_detail). Parameters: span start, end, src_asof, share, basis.
SELECT c.tenant, coalesce(c.namespace, '') AS namespace, coalesce(c.pod, '') AS pod, c.pod_uid, c.container,
       p.cluster, p.node, p.gpu_uuid, coalesce(p.model, '') AS model, c.price_micro, c.degraded_u
FROM cb_credit_sums(?, ?, ?, ?, ?) c JOIN cb_place_t p USING (pid)
