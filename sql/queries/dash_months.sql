-- Months with metered data, newest first.
SELECT DISTINCT strftime(date_trunc('month', hour), '%Y-%m') AS month
FROM gpu_hour ORDER BY month DESC;
