-- reads: calibration_jobs, events, subclass_jobs
-- writes: none
-- job_speed: how fast the same operators run in the warehouse's other jobs than in the base job,
-- on the same device and world size (lumos/estimate/working_set.py). On a CPU the training state
-- (weights, gradients, optimizer moments, activations) competes for the caches, so an op of
-- identical name, input shapes and dtypes runs slower in a job whose state is larger. Per other
-- job: the
-- time-weighted ratio of its ops' median durations to the base's medians of the same (name,
-- shapes). Jobs named in $exclude are left out (accuracy checks predict a job without learning
-- from it). Columns: job, ratio, matched op keys, matched time share of the job's op time.
WITH jobs AS (
    SELECT job, device, world FROM calibration_jobs($job, $exclude)
    WHERE job NOT IN (SELECT job FROM subclass_jobs($job, $exclude))
), ops AS (
    -- the key holds the dtypes too: the same shapes at another precision run other kernels
    SELECT e.job, e.name, concat(e.input_dims, ' ', e.input_types) AS dims, count(*) AS n,
           median(e.dur_ns) AS med
    FROM events AS e
    JOIN jobs AS j USING (job)
    -- CPU devices only: a GPU trace's CPU op is the launch, which the state does not slow
    WHERE j.device = (SELECT device FROM jobs WHERE job = $job) AND j.device = 'cpu'
      AND j.world = (SELECT world FROM jobs WHERE job = $job)
      AND e.cat = 'cpu_op' AND e.ph = 'X' AND e.dur_ns > 0
      -- only ops whose shapes are recorded: a name alone matches ops of other sizes
      AND regexp_matches(coalesce(e.input_dims, ''), '[0-9]')
      AND NOT is_comm(e.name)
      AND NOT borrowed_attention($job, $exclude, e.job, e.name)
    GROUP BY ALL
), base AS (
    SELECT name, dims, med FROM ops WHERE job = $job
), matched AS (
    SELECT o.job, sum(o.n * o.med) AS t_job, sum(o.n * b.med) AS t_base, count(*) AS n_keys
    FROM ops AS o JOIN base AS b USING (name, dims)
    WHERE o.job <> $job
    GROUP BY o.job
), totals AS (
    SELECT job, sum(n * med) AS t_all FROM ops GROUP BY job
)
SELECT m.job, m.t_job / m.t_base AS ratio, m.n_keys, m.t_job / t.t_all AS share
FROM matched AS m JOIN totals AS t USING (job)
WHERE m.t_base > 0
ORDER BY m.job;
