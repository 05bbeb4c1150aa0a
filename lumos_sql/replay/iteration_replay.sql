-- reads: g_sched, iterations, tasks
-- writes: g_iter_rel, iteration_replay
-- iteration_replay: measured against replayed iteration metrics, per job, rank, step and mode.
-- Needs the temp tables `iterations`, `tasks` (times relative to the rank's origin) and `g_sched`
-- (job, rank, mode, task, start_ns, end_ns) of the replay.
--
-- A step's start maps to the first CPU task of its thread that starts inside the step: replayed
-- step start = that task's replayed start - (its traced start - traced step start); its end to the
-- last task of the thread ending inside the step, likewise. So the profiler's own CPU overhead
-- around the step's first and last op stays as traced, and everything between is replayed.
-- The GPU span of a step is over the GPU tasks whose launch call started in the step (period
-- window), as in `iterations`. `ext_wait_ns`: how long the replay's GPU tasks of the step sat in
-- measured external waits (graph/waits; the union over streams, from the replayed step start);
-- `ext_wait_share` is that over the row's measured value.
CREATE OR REPLACE TEMP TABLE g_iter_rel AS
SELECT i.*, o.origin_ns,
       i.cpu_start_ns - o.origin_ns AS s_rel,
       i.cpu_end_ns - o.origin_ns AS e_rel,
       coalesce(i.next_start_ns, i.cpu_end_ns) - o.origin_ns AS w_rel
FROM iterations AS i
JOIN (SELECT rank, any_value(origin_ns) AS origin_ns FROM tasks GROUP BY rank) AS o USING (rank);

CREATE OR REPLACE TEMP TABLE iteration_replay AS
WITH first_t AS (
    SELECT i.rank, i.step, arg_min(t.task, t.task) AS task, arg_min(t.ts_ns, t.task) - i.s_rel AS off
    FROM g_iter_rel AS i
    JOIN tasks AS t ON t.rank = i.rank AND t.pid = i.pid AND t.tid = i.tid
    WHERE t.ts_ns >= i.s_rel AND t.ts_ns < i.e_rel
    GROUP BY i.rank, i.step, i.s_rel
), last_t AS (
    SELECT i.rank, i.step, arg_max(t.task, t.task) AS task,
           i.e_rel - arg_max(t.ts_ns + t.dur_ns, t.task) AS off
    FROM g_iter_rel AS i
    JOIN tasks AS t ON t.rank = i.rank AND t.pid = i.pid AND t.tid = i.tid
    WHERE t.ts_ns + t.dur_ns <= i.e_rel AND t.ts_ns >= i.s_rel
    GROUP BY i.rank, i.step, i.e_rel
), gpu_step AS (
    SELECT i.rank, i.step, g.task
    FROM g_iter_rel AS i
    JOIN tasks AS c ON c.rank = i.rank AND c.role IN ('launch', 'copy_issue')
                   AND c.ts_ns >= i.s_rel AND c.ts_ns < i.w_rel
    JOIN tasks AS g ON g.rank = c.rank AND g.is_gpu AND g.correlation = c.correlation
), modes AS (
    SELECT DISTINCT mode FROM g_sched
), rep AS (
    SELECT i.rank, i.step, m.mode,
           sf.start_ns - f.off AS r_start,
           sl.end_ns + l.off AS r_end
    FROM g_iter_rel AS i
    CROSS JOIN modes AS m
    JOIN first_t AS f ON f.rank = i.rank AND f.step = i.step
    JOIN last_t AS l ON l.rank = i.rank AND l.step = i.step
    JOIN g_sched AS sf ON sf.rank = i.rank AND sf.task = f.task AND sf.mode = m.mode
    JOIN g_sched AS sl ON sl.rank = i.rank AND sl.task = l.task AND sl.mode = m.mode
), rep_gpu AS (
    SELECT s.rank, s.step, g.mode, max(g.end_ns) - min(g.start_ns) AS r_gpu
    FROM gpu_step AS s
    JOIN g_sched AS g ON g.rank = s.rank AND g.task = s.task
    GROUP BY ALL
), ext_iv AS (
    -- the external waits (tasks.ext_wait_ns) of the step's GPU tasks as intervals before their
    -- replayed starts, from the replayed step start on; merged below so that two streams held
    -- at once count once
    SELECT s.rank, s.step, g.mode, greatest(g.start_ns - t.ext_wait_ns, r.r_start) AS lo,
           g.start_ns AS hi
    FROM gpu_step AS s
    JOIN tasks AS t ON t.rank = s.rank AND t.task = s.task AND t.ext_wait_ns > 0
    JOIN g_sched AS g ON g.rank = s.rank AND g.task = s.task
    JOIN rep AS r ON r.rank = s.rank AND r.step = s.step AND r.mode = g.mode
), ext_isl AS (
    SELECT *, sum(CASE WHEN prev_hi IS NULL OR lo > prev_hi THEN 1 ELSE 0 END)
                  OVER (PARTITION BY rank, step, mode ORDER BY lo, hi) AS island
    FROM (SELECT *, max(hi) OVER (PARTITION BY rank, step, mode ORDER BY lo, hi
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_hi
          FROM ext_iv WHERE hi > lo)
), ext AS (
    SELECT rank, step, mode, CAST(sum(span) AS BIGINT) AS ext_wait_ns
    FROM (SELECT rank, step, mode, island, max(hi) - min(lo) AS span FROM ext_isl GROUP BY ALL)
    GROUP BY ALL
), joined AS (
    SELECT i.job, i.rank, i.step, r.mode, i.warmup, i.truncated,
           i.cpu_step_ns, r.r_end - r.r_start AS r_cpu,
           i.period_ns,
           -- the next replayed step must be the next step: a step without a task of its own
           -- (a zero-length ProfilerStep) is not replayed, and the period would span two steps
           CASE WHEN lead(i.step) OVER w = i.step + 1 THEN lead(r.r_start) OVER w - r.r_start
           END AS r_period,
           i.gpu_span_ns, rg.r_gpu, coalesce(x.ext_wait_ns, 0) AS ext_wait_ns
    FROM g_iter_rel AS i
    JOIN rep AS r ON r.rank = i.rank AND r.step = i.step
    LEFT JOIN rep_gpu AS rg ON rg.rank = i.rank AND rg.step = i.step AND rg.mode = r.mode
    LEFT JOIN ext AS x ON x.rank = i.rank AND x.step = i.step AND x.mode = r.mode
    WINDOW w AS (PARTITION BY i.rank, r.mode ORDER BY i.step)
), long AS (
    SELECT job, rank, step, mode, warmup, truncated, ext_wait_ns, 'cpu_step' AS metric,
           cpu_step_ns AS measured_ns, r_cpu AS replayed_ns FROM joined
    UNION ALL
    SELECT job, rank, step, mode, warmup, truncated, ext_wait_ns, 'period', period_ns, r_period
    FROM joined
    UNION ALL
    SELECT job, rank, step, mode, warmup, truncated, ext_wait_ns, 'gpu_span', gpu_span_ns, r_gpu
    FROM joined
)
SELECT job, rank, step, metric, measured_ns, replayed_ns,
       abs(replayed_ns - measured_ns) / measured_ns::DOUBLE AS rel_error,
       mode, warmup, truncated, ext_wait_ns,
       ext_wait_ns / measured_ns::DOUBLE AS ext_wait_share
FROM long
WHERE measured_ns IS NOT NULL AND measured_ns > 0 AND replayed_ns IS NOT NULL
ORDER BY job, rank, step, metric, mode;
