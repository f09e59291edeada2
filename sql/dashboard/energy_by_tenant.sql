-- Energy (NVML counters) and emissions by tenant: a node's GPUs belong to its tenant.
SELECT
    g.tenant,
    coalesce(t.display_name, g.tenant)              AS display_name,
    sum(g.energy_joules) / 3600000                  AS energy_kwh,
    sum(g.energy_joules) / 3600000 * $carbon_g_per_kwh AS co2e_g,
    sum(g.metered_s) / 3600                         AS gpu_h
FROM gpu_days_tenant($start, $end) g
LEFT JOIN tenants t ON t.tenant = g.tenant
GROUP BY ALL ORDER BY energy_kwh DESC;
