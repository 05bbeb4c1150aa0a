-- reads: replay_quality
-- writes: none
-- Every replayed job's replay error: per job and metric, the worst rank's median relative error
-- over complete steps (the model replay), worst jobs first.
SELECT job, metric,
       100 * max(median_rel_error) AS median_error_pct,
       100 * max(max_rel_error) AS max_error_pct,
       count(*) AS n_ranks,
       max(n_steps) AS n_steps
FROM replay_quality
WHERE mode = 'model' AND median_rel_error IS NOT NULL
GROUP BY job, metric
ORDER BY median_error_pct DESC, job, metric;
