-- reads: jobs
-- writes: none
-- `lumos status`: one row per job (the catalog's `jobs` view), ranks shown as min-max.
SELECT
    job,
    ranks,
    CASE WHEN ranks = 0 THEN '-'
         WHEN min_rank = max_rank THEN CAST(min_rank AS VARCHAR)
         ELSE min_rank || '-' || max_rank END AS rank_range,
    world_size,
    files_ok,
    files_refused,
    events,
    bytes,
    devices
FROM jobs
ORDER BY job;
