-- reads: replay_quality
-- writes: none
-- replay_health: per rank and metric of one job, the model replay's error over complete steps,
-- the trace's unexplained GPU slack (kept as external waits: their share of the metric and main
-- cause), and how many of its collectives found no peers. Feeds the
-- `replay_accuracy` asset check (pipelines/checks_replay.py). Parameter: $job.
SELECT q.job, q.rank, q.metric, q.n_steps, q.median_rel_error, q.max_rel_error,
       coalesce(q.unexplained_slack_ns, 0) AS unexplained_slack_ns,
       coalesce(q.n_unexplained, 0) AS n_unexplained,
       q.ext_wait_share, q.wait_cause
FROM replay_quality AS q
WHERE q.job = $job AND q.mode = 'model'
ORDER BY q.rank, q.metric;
