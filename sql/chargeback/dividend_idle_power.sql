-- The measured idle floor of each GPU model: its lowest mean power over a well-metered
-- hour in the period (watts), from the day figures. What an extra, mostly idle GPU of that
-- model would draw.
SELECT model, min(idle_watts) AS idle_watts
FROM gpu_days($start, $end)
WHERE idle_watts IS NOT NULL
GROUP BY model;
