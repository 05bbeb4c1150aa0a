-- reads: calibration_jobs, events, subclass_jobs
-- writes: none
-- job_gaps: how long the idle gaps between top-level operators last in the warehouse's other jobs
-- than in the base job, on the same device and world size (lumos/estimate/idle_gaps.py). On a
-- CPU the gap before an op is Python and the allocator: the interpreter runs the model's code,
-- drops the references of tensors no longer needed and frees them, and larger tensors take
-- longer to free and to fault back in. Per other job: its per-op-name median gaps weighted by
-- the base's gap time of each name, against the base's own (the base's gaps re-timed at the
-- job's speed). Jobs named in $exclude are left out (accuracy checks predict a job without
-- learning from it). Columns: job, ratio, matched op names, matched share of the base's gap time.
WITH jobs AS (
    SELECT job, device, world FROM calibration_jobs($job, $exclude)
    WHERE job NOT IN (SELECT job FROM subclass_jobs($job, $exclude))
), raw AS (
    SELECT e.job, e.rank, e.tid, e.event_idx, e.name, e.ts_ns, e.ts_ns + e.dur_ns AS end_ns
    FROM events AS e
    JOIN jobs AS j USING (job)
    -- CPU devices only: a GPU job's host gaps hide behind its kernels
    WHERE j.device = (SELECT device FROM jobs WHERE job = $job) AND j.device = 'cpu'
      AND j.world = (SELECT world FROM jobs WHERE job = $job)
      AND e.cat = 'cpu_op' AND e.ph = 'X'
), marked AS (
    -- top level = not nested in an earlier op of the same thread (running max of end times)
    SELECT *, coalesce(ts_ns >= max(end_ns) OVER (
               PARTITION BY job, rank, tid ORDER BY ts_ns, event_idx
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS is_top
    FROM raw
), steps AS (
    SELECT e.job, e.rank, e.ts_ns AS step_ns, e.ts_ns + e.dur_ns AS step_end
    FROM events AS e
    JOIN jobs AS j USING (job)
    WHERE e.cat IN ('user_annotation', 'cpu_op') AND e.name LIKE 'ProfilerStep#%'
), in_step AS (
    -- between steps the trainer does what the step does not show (logging, evaluation, sleeps)
    SELECT m.job, m.rank, m.tid, m.event_idx, m.name, m.ts_ns, m.end_ns, s.step_ns
    FROM (SELECT * FROM marked WHERE is_top) AS m
    ASOF JOIN steps AS s ON m.job = s.job AND m.rank = s.rank AND m.ts_ns >= s.step_ns
    WHERE m.ts_ns < s.step_end
), gaps AS (
    SELECT job, name,
           ts_ns - lag(end_ns) OVER (
               PARTITION BY job, rank, tid, step_ns ORDER BY ts_ns, event_idx) AS gap
    FROM in_step
), per_name AS (
    SELECT job, name, count(*) AS n, median(gap) AS med
    FROM gaps
    -- a collective's neighbours wait for peers, not for Python
    WHERE gap >= 0 AND NOT is_comm(name)
    GROUP BY job, name
), base AS (
    SELECT name, n, med FROM per_name WHERE job = $job
), matched AS (
    SELECT o.job, sum(b.n * o.med) AS t_job, sum(b.n * b.med) AS t_base, count(*) AS n_names
    FROM per_name AS o JOIN base AS b USING (name)
    WHERE o.job <> $job
    GROUP BY o.job
)
SELECT m.job, m.t_job / m.t_base AS ratio, m.n_names,
       m.t_base / (SELECT sum(n * med) FROM base) AS share
FROM matched AS m
WHERE m.t_base > 0
ORDER BY m.job;
