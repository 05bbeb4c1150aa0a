-- reads: critical_path_summary
-- writes: none
-- One job's critical path: per replay mode and category, its share of the replayed steps'
-- windows (complete steps; every step when the job has none).
WITH s AS (
    SELECT *, bool_or(NOT warmup AND NOT truncated) OVER (PARTITION BY mode) AS any_complete
    FROM critical_path_summary
    WHERE job = $job AND mode IN ('model', 'multirank')
)
SELECT mode, category,
       sum(ns) / 1e6 AS ms,
       sum(ns) / sum(sum(ns)) OVER (PARTITION BY mode) AS share,
       count(DISTINCT (rank, step)) AS n_steps
FROM s
WHERE (NOT warmup AND NOT truncated) OR NOT any_complete
GROUP BY mode, category
HAVING sum(ns) > 0
ORDER BY mode, ms DESC;
