-- reads: iteration_replay
-- writes: none
-- Every replayed step of one job (rank, step): the steps a Perfetto export can be written for.
SELECT rank, step, bool_or(warmup) AS warmup, bool_or(truncated) AS truncated
FROM iteration_replay
WHERE job = $job AND mode = 'model'
GROUP BY rank, step
ORDER BY rank, step;
