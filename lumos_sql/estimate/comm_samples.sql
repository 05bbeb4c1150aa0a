-- reads: calibration_jobs, events
-- writes: none
-- comm_samples: all-reduces the warehouse holds on the same kind of device as job $job, to fit
-- the estimator's collective cost (lumos/estimate/comm.py). gloo writes a `gloo:all_reduce`
-- annotation per rank (its duration includes waiting for the peers); the k-th on each rank of a
-- job is one collective (order within the job, as lumos/replay/collectives.py matches them), and
-- the fastest rank's duration is the one least inflated by waiting.
-- Jobs named in $exclude are left out (accuracy checks predict a job without learning from it).
-- Columns: group size (world size of the job), message elements (first input's dims), its
-- duration (ns), the device kind ('cpu' or 'gpu'), the job.
WITH dev AS (
    SELECT kind FROM calibration_jobs($job, $exclude) WHERE is_base
), jobs AS (
    SELECT job, world, kind FROM calibration_jobs($job, $exclude)
), ar AS (
    SELECT e.job, e.rank, e.input_dims, e.dur_ns,
           row_number() OVER (PARTITION BY e.job, e.rank ORDER BY e.ts_ns, e.event_idx) AS k
    FROM events AS e
    WHERE e.cat = 'user_annotation' AND e.name = 'gloo:all_reduce' AND e.dur_ns > 0
), per AS (
    SELECT job, k, min(dur_ns) AS dur_ns, any_value(input_dims) AS input_dims,
           count(*) AS n_ranks
    FROM ar GROUP BY job, k
)
SELECT j.world AS group_size, p.input_dims, p.dur_ns, d.kind, p.job
FROM per AS p
JOIN jobs AS j USING (job)
CROSS JOIN dev AS d
WHERE j.kind = d.kind AND p.n_ranks = j.world AND j.world > 1
UNION ALL
SELECT NULL, NULL, NULL, d.kind, NULL FROM dev AS d
ORDER BY 1 NULLS LAST;
