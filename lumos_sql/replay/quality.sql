-- reads: g_slack, iteration_replay
-- writes: none
-- replay_quality: per job, rank and mode, the median and max replay error of each metric over the
-- complete steps (neither warm-up nor truncated), beside the trace's unexplained GPU slack (kept
-- as measured external waits in the model replay), the median share of the metric those waits
-- take, and the cause that holds most of their time (graph/waits).
SELECT q.job, q.rank, q.mode, q.metric,
       count(*) AS n_steps,
       median(q.rel_error) AS median_rel_error,
       max(q.rel_error) AS max_rel_error,
       any_value(s.unexplained_slack_ns) AS unexplained_slack_ns,
       any_value(s.n_unexplained) AS n_unexplained,
       median(q.ext_wait_share) AS ext_wait_share,
       any_value(s.wait_cause) AS wait_cause
FROM iteration_replay AS q
LEFT JOIN g_slack AS s ON s.rank = q.rank
WHERE NOT q.warmup AND NOT q.truncated
GROUP BY ALL
ORDER BY q.job, q.rank, q.metric, q.mode;
