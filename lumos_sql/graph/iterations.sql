-- reads: g_ev, g_groups, g_rt1
-- writes: g_capture, g_gpu_step, g_launch_step, g_missing_step, g_steps, g_steps2, iterations
-- iterations: one row per rank and profiler step of the job in g_ev.
--
-- * cpu span: the `ProfilerStep#N` annotation (a cpu_op in legacy traces).
-- * period: this step's start to the next step's start, only when the next traced step is step + 1
--   (NULL for the last step, and where untraced steps lie between: profilers that trace one step
--   per cycle number them #2, #5, #8).
-- * gpu span: first start to last end of the GPU tasks *launched* in the step, i.e. whose launching
--   runtime call starts in [step start, next step start) (the last step: [start, end]). GPU time
--   never assigns work to a step: the GPU can run 90 ms behind the CPU.
-- * warmup: the first step of a trace that holds more than one step (caches, allocator and
--   autotuning make it unrepresentative).
-- * truncated: the step has launches whose GPU task is not in the trace (the capture stopped
--   before its GPU work ran), or its CPU span is under half the median of the rank's steps (a step
--   the profiler cut short, e.g. 0.05 ms against 9.29 ms).
-- complete = neither; replay accuracy is reported on complete steps.
-- * whole_capture: a rank whose trace has no ProfilerStep (a profiler used without a schedule, or
--   around a loop that never calls prof.step()) gets one iteration, step 0: the whole capture, as
--   its busiest CPU thread saw it (the thread whose top-level operators and runtime calls cover
--   the most time; first start to last end), so its replay is still compared with the trace.
CREATE OR REPLACE TEMP TABLE g_steps AS
WITH s AS (
    SELECT rank, pid, tid, ts_ns, end_ns,
           CAST(regexp_extract(name, 'ProfilerStep#(\d+)', 1) AS BIGINT) AS step
    FROM g_ev
    WHERE cat IN ('user_annotation', 'cpu_op') AND name LIKE 'ProfilerStep#%'
)
SELECT rank, step, any_value(pid) AS pid, any_value(tid) AS tid,
       min(ts_ns) AS cpu_start_ns, max(end_ns) AS cpu_end_ns
FROM s
WHERE step IS NOT NULL
GROUP BY rank, step;

CREATE OR REPLACE TEMP TABLE g_capture AS
WITH spans AS (
    SELECT rank, pid, tid, ts_ns, end_ns FROM g_groups
    UNION ALL
    SELECT rank, pid, tid, ts_ns, end_ns FROM g_rt1
), runs AS (
    -- merged intervals per thread: a span starts a run when it begins after every earlier end
    SELECT *,
           sum(CASE WHEN prev_max_end IS NULL OR prev_max_end < ts_ns THEN 1 ELSE 0 END)
               OVER (PARTITION BY rank, pid, tid ORDER BY ts_ns, end_ns DESC
                     ROWS UNBOUNDED PRECEDING) AS run
    FROM (SELECT *,
                 max(end_ns) OVER (PARTITION BY rank, pid, tid ORDER BY ts_ns, end_ns DESC
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
                     AS prev_max_end
          FROM spans
          WHERE rank NOT IN (SELECT rank FROM g_steps))
), threads AS (
    -- busy = time covered by the thread's operators and calls
    SELECT rank, pid, tid, sum(run_end - run_start) AS busy_ns,
           min(run_start) AS cpu_start_ns, max(run_end) AS cpu_end_ns
    FROM (SELECT rank, pid, tid, run, min(ts_ns) AS run_start, max(end_ns) AS run_end
          FROM runs GROUP BY ALL)
    GROUP BY ALL
)
-- the busiest thread of each rank; ties: the lowest pid, tid
SELECT rank, CAST(0 AS BIGINT) AS step, pid, tid, cpu_start_ns, cpu_end_ns
FROM threads
QUALIFY row_number() OVER (PARTITION BY rank ORDER BY busy_ns DESC, pid, tid) = 1;

INSERT INTO g_steps SELECT * FROM g_capture;

CREATE OR REPLACE TEMP TABLE g_steps2 AS
SELECT *,
       CASE WHEN lead(step) OVER (PARTITION BY rank ORDER BY cpu_start_ns) = step + 1
            THEN lead(cpu_start_ns) OVER (PARTITION BY rank ORDER BY cpu_start_ns)
       END AS next_start_ns,
       row_number() OVER (PARTITION BY rank ORDER BY cpu_start_ns) - 1 AS ordinal,
       count(*) OVER (PARTITION BY rank) AS n_steps,
       median(cpu_end_ns - cpu_start_ns) OVER (PARTITION BY rank) AS median_cpu_ns
FROM g_steps;

-- every runtime call that launches GPU work, with the step it belongs to
CREATE OR REPLACE TEMP TABLE g_launch_step AS
SELECT r.rank, r.correlation, r.ts_ns, s.step
FROM (SELECT rank, correlation, min(ts_ns) AS ts_ns
      FROM g_ev WHERE cat IN ('cuda_runtime', 'cuda_driver') AND correlation IS NOT NULL
      GROUP BY rank, correlation) AS r
ASOF JOIN g_steps2 AS s ON r.rank = s.rank AND r.ts_ns >= s.cpu_start_ns
WHERE r.ts_ns < coalesce(s.next_start_ns, s.cpu_end_ns);

CREATE OR REPLACE TEMP TABLE g_gpu_step AS
SELECT l.rank, l.step,
       min(g.ts_ns) AS gpu_start_ns, max(g.end_ns) AS gpu_end_ns, count(*) AS n_gpu_tasks
FROM g_launch_step AS l
JOIN g_ev AS g
  ON g.rank = l.rank AND g.correlation = l.correlation
 AND g.cat IN ('kernel', 'gpu_memcpy', 'gpu_memset')
GROUP BY l.rank, l.step;

-- launches of a step whose GPU task never shows up; runtime calls that enqueue no GPU work
-- only kernel launches count: a zero-byte cudaMemsetAsync enqueues nothing, a launch always does
CREATE OR REPLACE TEMP TABLE g_missing_step AS
SELECT l.rank, l.step, count(*) AS n_missing
FROM g_launch_step AS l
JOIN g_ev AS r ON r.rank = l.rank AND r.correlation = l.correlation
               AND r.cat IN ('cuda_runtime', 'cuda_driver')
WHERE r.name ILIKE '%launchkernel%'
  AND NOT EXISTS (SELECT 1 FROM g_ev AS g
                  WHERE g.rank = l.rank AND g.correlation = l.correlation
                    AND g.cat IN ('kernel', 'gpu_memcpy', 'gpu_memset'))
GROUP BY l.rank, l.step;

CREATE OR REPLACE TEMP TABLE iterations AS
SELECT
    (SELECT any_value(job) FROM g_ev) AS job,
    CAST(s.rank AS INTEGER) AS rank,
    s.step,
    CAST(s.ordinal AS INTEGER) AS ordinal,
    s.pid,
    s.tid,
    s.cpu_start_ns,
    s.cpu_end_ns,
    s.cpu_end_ns - s.cpu_start_ns AS cpu_step_ns,
    s.next_start_ns,
    s.next_start_ns - s.cpu_start_ns AS period_ns,
    g.gpu_start_ns,
    g.gpu_end_ns,
    g.gpu_end_ns - g.gpu_start_ns AS gpu_span_ns,
    coalesce(g.n_gpu_tasks, 0) AS n_gpu_tasks,
    coalesce(m.n_missing, 0) AS n_missing_gpu,
    (s.ordinal = 0 AND s.n_steps > 1) AS warmup,
    (coalesce(m.n_missing, 0) > 0
     OR (s.cpu_end_ns - s.cpu_start_ns) < 0.5 * s.median_cpu_ns) AS truncated,
    s.rank IN (SELECT rank FROM g_capture) AS whole_capture
FROM g_steps2 AS s
LEFT JOIN g_gpu_step AS g USING (rank, step)
LEFT JOIN g_missing_step AS m USING (rank, step)
ORDER BY rank, step;
