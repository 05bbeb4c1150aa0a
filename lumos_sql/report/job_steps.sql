-- reads: iteration_replay
-- writes: none
-- One job's steps, measured beside replayed (the model replay, and the multi-rank replay where
-- the job has several ranks), per rank, step and metric; times in ms.
SELECT rank, step, metric, mode,
       measured_ns / 1e6 AS measured_ms,
       replayed_ns / 1e6 AS replayed_ms,
       100 * rel_error AS error_pct,
       warmup, truncated
FROM iteration_replay
WHERE job = $job AND mode IN ('model', 'multirank')
ORDER BY rank, step, metric, mode;
