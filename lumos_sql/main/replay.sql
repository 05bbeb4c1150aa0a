-- reads: replay_quality
-- writes: none
-- The main job's replay table: per job, rank and metric, replayed vs measured over complete steps,
-- the model replay beside the identity replay (a graph consistency check) and the trace's
-- unexplained GPU slack.
SELECT m.job, m.rank, m.metric, m.n_steps AS steps,
       round(100 * m.median_rel_error, 2) AS model_median_pct,
       round(100 * m.max_rel_error, 2) AS model_max_pct,
       round(100 * i.median_rel_error, 2) AS identity_median_pct,
       round(coalesce(m.unexplained_slack_ns, 0) / 1e6, 2) AS slack_ms
FROM replay_quality AS m
LEFT JOIN replay_quality AS i
  ON i.job = m.job AND i.rank = m.rank AND i.metric = m.metric AND i.mode = 'identity'
WHERE m.mode = 'model'
ORDER BY m.job, m.rank, m.metric;
