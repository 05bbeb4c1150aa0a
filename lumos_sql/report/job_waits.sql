-- reads: collectives, iterations
-- writes: none
-- External waits of one job: per rank and step, the time its collectives waited for their
-- peers' arrival (collectives.wait_ns of the collectives that started in the step's GPU span).
SELECT i.rank, i.step,
       coalesce(sum(c.wait_ns), 0) / 1e6 AS wait_ms,
       count(c.wait_ns) AS n_collectives
FROM iterations AS i
JOIN collectives AS c
  ON c.job = i.job AND c.rank = i.rank
 AND c.start_ns >= i.gpu_start_ns AND c.start_ns < i.gpu_end_ns
WHERE i.job = $job
GROUP BY i.rank, i.step
ORDER BY i.rank, i.step;
