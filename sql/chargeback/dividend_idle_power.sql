-- The measured idle floor of each GPU model: its lowest mean power over a well-metered
-- hour in the period (watts). What an extra, mostly idle GPU of that model would draw.
SELECT model, min(energy_joules / metered_s) AS idle_watts
FROM gpu_hour
WHERE hour >= $start AND hour < $end AND metered_s >= 600 AND energy_joules > 0
GROUP BY model;
