-- reads: job_events
-- writes: none
-- estimate/gpu_busy: per rank and traced step of job $job, how long its GPUs were busy inside the
-- step (the union of kernel, memcpy and memset intervals clipped to the CPU ProfilerStep span) and
-- how long its CPU threads waited in synchronising runtime calls (stream, device and event
-- synchronize, blocking cudaMemcpy / hipMemcpy). The estimator re-times CPU operators only: a step
-- whose GPU work is a large share of it is warned about (lumos/estimate/infer.py).
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
WITH steps AS (
    SELECT rank, ts_ns AS s0, ts_ns + dur_ns AS s1,
           row_number() OVER (PARTITION BY rank ORDER BY ts_ns) AS step
    FROM job_events
    WHERE job = $job AND cat IN ('user_annotation', 'cpu_op') AND name LIKE 'ProfilerStep#%' AND dur_ns > 0
), gpu AS (
    SELECT s.rank, s.step, greatest(e.ts_ns, s.s0) AS a, least(e.ts_ns + e.dur_ns, s.s1) AS b
    FROM job_events AS e
    JOIN steps AS s ON s.rank = e.rank AND e.ts_ns < s.s1 AND e.ts_ns + e.dur_ns > s.s0
    WHERE e.job = $job AND e.ph = 'X' AND e.cat IN ('kernel', 'gpu_memcpy', 'gpu_memset')
), runs AS (
    -- the union of the intervals: each adds what reaches past every earlier one's end
    SELECT rank, step, a, b,
           max(b) OVER (PARTITION BY rank, step ORDER BY a, b
                        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM gpu
), busy AS (
    SELECT rank, step, sum(greatest(b - greatest(a, coalesce(reach, a)), 0)) AS busy_ns
    FROM runs
    GROUP BY ALL
), sync AS (
    SELECT s.rank, s.step, sum(least(e.ts_ns + e.dur_ns, s.s1) - greatest(e.ts_ns, s.s0)) AS sync_ns
    FROM job_events AS e
    JOIN steps AS s ON s.rank = e.rank AND e.ts_ns < s.s1 AND e.ts_ns + e.dur_ns > s.s0
    WHERE e.job = $job AND e.ph = 'X' AND e.cat IN ('cuda_runtime', 'cuda_driver')
      AND (contains(lower(e.name), 'synchronize') OR lower(e.name) IN ('cudamemcpy', 'hipmemcpy'))
    GROUP BY ALL
)
SELECT s.rank, s.step, s.s1 - s.s0 AS step_ns, coalesce(b.busy_ns, 0) AS busy_ns,
       coalesce(y.sync_ns, 0) AS sync_ns
FROM steps AS s
LEFT JOIN busy AS b USING (rank, step)
LEFT JOIN sync AS y USING (rank, step)
ORDER BY s.rank, s.step;
