-- reads: calibration_jobs, events, subclass_jobs
-- writes: none
-- contention: how much slower the same operator runs when a job's ranks share one device, learned
-- from the warehouse's own jobs (lumos/estimate/contention.py). CPU ranks of one job share the
-- host's
-- cores, caches and memory bandwidth, so an op of identical name, input shapes and dtypes takes
-- longer in
-- a 2-rank job than in a single-rank one on the same device. Per multi-rank job: the time-weighted
-- ratio of its ops' median durations to the single-rank jobs' medians of the same (name, shapes),
-- over the slots of top-level compute ops only (collectives and their waits are the comm model's).
-- Jobs named in
-- $exclude are left out (accuracy checks predict a job without learning from it).
-- Columns: world size, job, ratio, matched op keys, matched time share of the job's op time, and
-- `refs`: the single-rank jobs its matched ops were compared with, each with the multi-rank job's
-- time on the keys it shares ({job, t}): their training state is the reference the ratio was
-- taken at (contention.Contention removes the working set's part of the ratio with it).
WITH jobs AS (
    SELECT job, device, world FROM calibration_jobs($job, $exclude)
    WHERE job NOT IN (SELECT job FROM subclass_jobs($job, $exclude))
), steps AS (
    SELECT s.job, s.rank, s.ts_ns AS s0, s.ts_ns + s.dur_ns AS s1
    FROM events AS s
    JOIN jobs AS j USING (job)
    WHERE s.cat IN ('user_annotation', 'cpu_op') AND s.name LIKE 'ProfilerStep#%' AND s.dur_ns > 0
), raw AS (
    -- the key holds the dtypes too: the same shapes at another precision run other kernels;
    -- the ops of traced steps only, each with its step (`s0`)
    SELECT e.job, e.rank, e.tid, e.event_idx, e.name, coalesce(e.input_dims, '') AS shape,
           concat(e.input_dims, ' ', e.input_types) AS dims,
           e.ts_ns, e.ts_ns + e.dur_ns AS end_ns, st.s0
    FROM events AS e
    JOIN jobs AS j USING (job)
    JOIN steps AS st ON st.job = e.job AND st.rank = e.rank AND e.ts_ns >= st.s0
                    AND e.ts_ns < st.s1
    WHERE j.device = (SELECT device FROM calibration_jobs($job, $exclude) WHERE is_base)
      AND e.cat = 'cpu_op' AND e.ph = 'X'
), top AS (
    -- top level = not nested in an earlier op of the same thread (running max of end times)
    SELECT *, coalesce(ts_ns >= max(end_ns) OVER (
               PARTITION BY job, rank, tid ORDER BY ts_ns, event_idx
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS is_top
    FROM raw
), slots AS (
    -- an op's slot runs to the next top-level op's start: its duration plus the Python and
    -- dispatch time after it, which sharing the cores slows as much as the op itself; within
    -- its step (the last op's slot would hold the wait for the step's end: peers of a
    -- pipeline, a barrier, the gap between profiler cycles)
    SELECT job, name, shape, dims,
           lead(ts_ns) OVER (PARTITION BY job, rank, tid, s0 ORDER BY ts_ns, event_idx)
               - ts_ns AS slot
    FROM top WHERE is_top
), ops AS (
    SELECT job, name, dims, slot AS dur_ns FROM slots
    -- only ops whose shapes are recorded: a backward function's name alone matches ops of other
    -- sizes in other jobs
    WHERE slot > 0 AND regexp_matches(shape, '[0-9]') AND NOT is_comm(name)
      AND NOT borrowed_attention($job, $exclude, job, name)
), per_job AS (
    SELECT job, name, dims, count(*) AS n, median(dur_ns) AS med
    FROM ops GROUP BY job, name, dims
), single AS (
    SELECT p.name, p.dims, median(p.med) AS med
    FROM per_job AS p JOIN jobs AS j USING (job)
    WHERE j.world = 1
    GROUP BY p.name, p.dims
), multi AS (
    SELECT j.world, p.job, sum(p.n * p.med) AS t_multi, sum(p.n * s.med) AS t_single,
           count(*) AS n_keys
    FROM per_job AS p
    JOIN jobs AS j USING (job)
    JOIN single AS s USING (name, dims)
    WHERE j.world > 1
    GROUP BY j.world, p.job
), totals AS (
    SELECT job, sum(n * med) AS t_all FROM per_job GROUP BY job
), shared AS (
    SELECT p.job, o.job AS single, sum(p.n * p.med) AS t
    FROM per_job AS p
    JOIN jobs AS jm ON jm.job = p.job AND jm.world > 1
    JOIN per_job AS o ON o.name = p.name AND o.dims = p.dims
    JOIN jobs AS js ON js.job = o.job AND js.world = 1
    GROUP BY p.job, o.job
), refs AS (
    SELECT job, list({'job': single, 't': t} ORDER BY single) AS refs FROM shared GROUP BY job
)
SELECT m.world, m.job, m.t_multi / m.t_single AS ratio, m.n_keys, m.t_multi / t.t_all AS share,
       r.refs
FROM multi AS m JOIN totals AS t USING (job) LEFT JOIN refs AS r USING (job)
WHERE m.t_single > 0
ORDER BY m.world, m.job;
