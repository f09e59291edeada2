-- GPU-hours by tenant and namespace: allocated (dominant share) and used (usage share), and
-- the slice-hours whose usage could not be checked against NVML.
SELECT
    s.tenant,
    coalesce(t.display_name, s.tenant)                AS display_name,
    coalesce(s.namespace, '(none)')                   AS namespace,
    count(DISTINCT s.pod_uid || '/' || s.container)   AS slices,
    sum(s.alloc_s) / 3600                             AS allocated_gpu_h,
    sum(s.usage_s) / 3600                             AS used_gpu_h,
    sum(s.unverified_s) / 3600                        AS unverified_h
FROM slice_days_tenant($start, $end) s
LEFT JOIN tenants t ON t.tenant = s.tenant
GROUP BY ALL
ORDER BY allocated_gpu_h DESC, tenant, namespace;
