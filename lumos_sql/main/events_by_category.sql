-- reads: events
-- writes: none
-- The main job's small per-category table: one row per normalised category, one column of event
-- counts per job.
PIVOT (
    SELECT coalesce(nullif(cat, ''), '(none)') AS category, job FROM events
)
ON job
USING count(*)
GROUP BY category
ORDER BY category;
