-- Months with metered data, newest first, with how much of each is metered: days with
-- any data, and the hours of the month covered (the default month needs a few days).
SELECT
    strftime(date_trunc('month', hour), '%Y-%m')  AS month,
    count(DISTINCT date_trunc('day', hour))       AS days,
    count(*)                                      AS hours
FROM metered_hours()
GROUP BY ALL ORDER BY month DESC;
