-- reads: deps, g_const, g_ev, g_gpu_t, g_noise, tasks, traces
-- writes: g_ext_wait, tasks
-- g_ext_wait: the measured external waits of the model replay (run after graph/deps). A GPU task
-- whose traced start is later than every edge of the graph explains (launch end + launch
-- latency + gap, stream predecessor end + gap, inter-stream or SM-wait predecessor end + gap) by
-- more than ext_wait_min_ns (lumos_sql/thresholds.py: timer noise, or the rank's own noise band
-- g_noise where that is wider) waited for something outside the graph: the whole delay
-- is kept as a wait before it in the model replay (tasks.ext_wait_ns, lumos.replay.build), so a
-- job traced on a few ranks reproduces its step instead of running those kernels at launch.
-- A task with neither a launch nor a stream predecessor (the model places it at its traced
-- offset) has none. Cause, first that applies:
--   peers_not_traced       a collective kernel of a job that lacks some ranks of its world
--                          (traces.world_size; unknown world counts as lacking): its peers'
--                          arrival is unknown, its traced start is the best evidence of it
--   unmatched_stream_wait  launched after a cudaStreamWaitEvent issued since its stream's previous
--                          launch that no stream_wait edge explains (the record is not in the
--                          trace, or ran on a stream whose end does not fit)
--   unknown                anything else (a device-wide stall, a host callback, another process)
CREATE OR REPLACE TEMP TABLE g_ext_wait AS
WITH sw AS (
    SELECT d.rank, d.dst AS task, max(s.ts_ns + s.dur_ns) AS sw_end
    FROM deps AS d JOIN tasks AS s ON s.rank = d.rank AND s.task = d.src
    WHERE d.kind IN ('stream_wait', 'stream_wait_inferred', 'sm_wait')
    GROUP BY ALL
), world AS (
    SELECT max(world_size) AS world, count(DISTINCT rank) AS n_ranks
    FROM traces
    WHERE job = (SELECT any_value(job) FROM g_ev) AND status = 'ok'
), late AS (
    SELECT * FROM (
        SELECT g.rank, g.task, g.launch_ts, g.prev_launch_ts, c.gap_ns, n.ovl_ns,
               g.ts_ns - greatest(g.launch_end + c.launch_lat_ns + c.gap_ns,
                                  g.prev_end + c.gap_ns, sw.sw_end + c.gap_ns) AS wait_ns
        FROM g_gpu_t AS g
        JOIN g_const AS c ON c.rank = g.rank AND c.device = g.device
        JOIN g_noise AS n ON n.rank = g.rank
        LEFT JOIN sw ON sw.rank = g.rank AND sw.task = g.task
    )
    WHERE wait_ns > ext_wait_min_ns(gap_ns, ovl_ns)
), call AS (
    -- the last cudaStreamWaitEvent (any thread) before the task's launch
    SELECT l.rank, l.task, w.ts_ns AS wait_call_ts
    FROM late AS l
    ASOF JOIN (SELECT rank, ts_ns FROM tasks WHERE role = 'stream_wait') AS w
      ON w.rank = l.rank AND w.ts_ns < l.launch_ts
)
SELECT l.rank, l.task, l.wait_ns,
       CASE WHEN t.kind = kind_collective()
                 AND coalesce((SELECT world > n_ranks FROM world), TRUE) THEN 'peers_not_traced'
            WHEN c.wait_call_ts >= coalesce(l.prev_launch_ts, 0) THEN 'unmatched_stream_wait'
            ELSE 'unknown'
       END AS cause
FROM late AS l
JOIN tasks AS t ON t.rank = l.rank AND t.task = l.task
LEFT JOIN call AS c ON c.rank = l.rank AND c.task = l.task;

UPDATE tasks AS t
SET ext_wait_ns = w.wait_ns, wait_cause = w.cause
FROM g_ext_wait AS w
WHERE w.rank = t.rank AND w.task = t.task;
