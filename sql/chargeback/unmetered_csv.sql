-- The unmetered CSV's hour and seconds cells, one row per row of cb_unmetered_arrow (the
-- bill's cb_unmetered_hours rows), in its order: formatted here, at fleet scale hundreds of
-- thousands of rows, rather than value by value in Python (same text: printf rounds like
-- Python's format).
SELECT strftime(hour, '%Y-%m-%dT%H:00:00Z') AS hour,
       printf('%.3f', metered_s) AS metered_s,
       printf('%.3f', gpu_metered_s) AS gpu_metered_s,
       printf('%.3f', unmetered_s) AS unmetered_s
FROM cb_unmetered_arrow
