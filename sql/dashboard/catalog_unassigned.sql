-- Clusters whose stored hours match no tenant of the catalog (billed as 'unassigned'),
-- with their sample counts (GPU and slice rows), between $start and $end.
WITH slices AS (
    SELECT cluster, sum(sample_count) AS slice_samples
    FROM slice_hour
    WHERE hour >= $start AND hour < $end AND cluster NOT IN (SELECT cluster FROM cluster_tenant)
    GROUP BY cluster
), gpus AS (
    SELECT cluster, sum(sample_count) AS gpu_samples, count(DISTINCT node) AS nodes,
           sum(metered_s) / 3600 AS gpu_hours, min(hour) AS first_hour, max(hour) AS last_hour
    FROM gpu_hour
    WHERE hour >= $start AND hour < $end AND cluster NOT IN (SELECT cluster FROM cluster_tenant)
    GROUP BY cluster
)
SELECT cluster,
       coalesce(gpu_samples, 0) + coalesce(slice_samples, 0) AS samples,
       coalesce(gpu_samples, 0)   AS gpu_samples,
       coalesce(slice_samples, 0) AS slice_samples,
       coalesce(nodes, 0)         AS nodes,
       coalesce(gpu_hours, 0)     AS gpu_hours,
       first_hour, last_hour
FROM gpus FULL OUTER JOIN slices USING (cluster)
ORDER BY samples DESC, cluster;
