-- reads: job_events
-- writes: none
-- estimate/order: per rank, within one step's window [$t0, $t1), when forward attention ops run
-- and when autograd backward work starts. Backward work starting before the last forward means
-- forward and backward interleave (1F1B or gradient accumulation); all forwards first is GPipe.
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
WITH fwd AS (
    SELECT rank, min(ts_ns) AS first_fwd_ns, max(ts_ns) AS last_fwd_ns, count(*) AS n_fwd
    FROM job_events
    WHERE job = $job AND cat = 'cpu_op' AND ts_ns >= $t0 AND ts_ns < $t1
      AND is_attention(name)
      AND lower(name) NOT LIKE '%backward%'
    GROUP BY rank
),
bwd AS (
    SELECT rank, min(ts_ns) AS first_bwd_ns, count(*) AS n_bwd
    FROM job_events
    WHERE job = $job AND cat = 'cpu_op' AND ts_ns >= $t0 AND ts_ns < $t1
      AND name LIKE 'autograd::engine::evaluate_function:%'
    GROUP BY rank
)
SELECT fwd.rank, first_fwd_ns, last_fwd_ns, n_fwd, first_bwd_ns, n_bwd
FROM fwd LEFT JOIN bwd USING (rank)
WHERE fwd.rank = $rank;
