-- reads: g_gpu, g_launch_step, g_rt1
-- writes: g_const_raw, g_queued_gap, g_step_gap_raw
-- g_const_raw: the trace's own evidence for the replay constants, per rank and GPU device
-- (lumos/replay/constants.py turns it into constants with explicit rules and fallbacks).
--   idle_launch_*: launch call end -> GPU start, for tasks whose stream was idle when the call
--                  ended (the previous task had ended): launch latency + inter-op gap
--   gap_*:         previous end -> start on a stream whose next task was already launched (queued
--                  work): the GPU inter-op gap (gap_med holds the trimmed mean, see below)
--   sync_*:        GPU end -> return of the syncing call that waited for it (blocking copies and
--                  stream/device syncs that started before their target ended)
--   launch_call_*: duration of launching calls (cudaLaunchKernel & co.), blocking copies excluded
--   max_queued:    the most GPU tasks launched but not started at the end of a launch call
--                  (evidence of the launch-queue depth)
-- g_step_gap_raw: the gap evidence of each profiler step (rank, device, step; a GPU task's step is
-- its launch's, graph/iterations), by the same rule over the step's own queued gaps. The gap of
-- the same tasks moves from step to step while gap + duration stays (trace_diff/test: its first
-- 900 stream-7 tasks span 42.7-43.9 ms in every step, their gaps 7.2-8.5 ms of it), and the
-- model replay takes each step's durations from that step: its gaps must come from it too.
CREATE OR REPLACE TEMP TABLE g_queued_gap AS
SELECT rank, device, correlation, ts_ns - prev_max_end AS g
FROM g_gpu
WHERE launch_end IS NOT NULL AND prev_max_end IS NOT NULL
  AND launch_end < prev_max_end AND ts_ns >= prev_max_end;

CREATE OR REPLACE TEMP TABLE g_step_gap_raw AS
SELECT rank, device, step, avg(g) FILTER (WHERE g <= 3 * g_med) AS gap_med, count(*) AS gap_n
FROM (SELECT q.rank, q.device, l.step, q.g,
             median(q.g) OVER (PARTITION BY q.rank, q.device, l.step) AS g_med
      FROM g_queued_gap AS q
      JOIN g_launch_step AS l ON l.rank = q.rank AND l.correlation = q.correlation)
GROUP BY ALL
ORDER BY rank, device, step;

CREATE OR REPLACE TEMP TABLE g_const_raw AS
WITH devs AS (
    SELECT DISTINCT rank, device FROM g_gpu
), idle AS (
    SELECT rank, device,
           median(ts_ns - launch_end) AS idle_launch_med,
           count(*) AS idle_launch_n
    FROM g_gpu
    WHERE launch_end IS NOT NULL AND launch_role = 'launch' AND corr_rank = 1
      AND coalesce(prev_max_end, 0) < launch_end AND ts_ns >= launch_end
    GROUP BY ALL
), gap0 AS (
    SELECT rank, device, g, median(g) OVER (PARTITION BY rank, device) AS g_med
    FROM g_queued_gap
), gap AS (
    -- the mean, not the median: a replay adds one gap per task, so only the mean keeps the sum
    -- of a stream's gaps (ns_resolution: GPU span error 0.15 % with the median, 0.02 % with the
    -- mean). Samples above 3 medians are waits on something else (a dependency the graph
    -- explains or not), not the launch gap: with 10 medians trace_diff/test's busy phases run
    -- ~0.6 us per task slow (max step error 2.9 % against 2.2 %).
    SELECT rank, device, avg(g) FILTER (WHERE g <= 3 * g_med) AS gap_med, count(*) AS gap_n
    FROM gap0
    GROUP BY ALL
), sync_target AS (
    -- the latest GPU end on the call's stream (or device) at or before the call's end
    SELECT r.rank, r.t_device AS device, r.ts_ns, r.end_ns, g.end_ns AS g_end
    FROM (SELECT * FROM g_rt1 WHERE role = 'stream_sync' AND t_stream IS NOT NULL) AS r
    ASOF JOIN (SELECT rank, device, stream, end_ns FROM g_gpu) AS g
      ON g.rank = r.rank AND g.device = r.t_device AND g.stream = r.t_stream
     AND g.end_ns <= r.end_ns
    UNION ALL
    SELECT r.rank, r.t_device, r.ts_ns, r.end_ns, g.end_ns
    FROM (SELECT * FROM g_rt1 WHERE role = 'device_sync' AND t_device IS NOT NULL) AS r
    ASOF JOIN (SELECT rank, device, end_ns FROM g_gpu) AS g
      ON g.rank = r.rank AND g.device = r.t_device AND g.end_ns <= r.end_ns
    UNION ALL
    SELECT rank, l_device, ts_ns, end_ns, l_end FROM g_rt1 WHERE role = 'blocking_copy'
), sync AS (
    SELECT rank, device, median(end_ns - g_end) AS sync_med, count(*) AS sync_n
    FROM sync_target
    WHERE ts_ns < g_end
    GROUP BY ALL
), lcall AS (
    SELECT rank, l_device AS device, median(dur_ns) AS launch_call_med, count(*) AS launch_call_n
    FROM g_rt1 WHERE role = 'launch'
    GROUP BY ALL
), queued AS (
    -- launched-not-started count at each launch end: launches ended so far minus tasks started
    SELECT l.rank, l.device, max(l.n_launched - coalesce(s.n_started, 0)) AS max_queued
    FROM (SELECT rank, device, launch_end,
                 row_number() OVER (PARTITION BY rank, device ORDER BY launch_end) AS n_launched
          FROM g_gpu WHERE launch_end IS NOT NULL AND corr_rank = 1) AS l
    ASOF LEFT JOIN (SELECT rank, device, ts_ns,
                           row_number() OVER (PARTITION BY rank, device ORDER BY ts_ns) AS n_started
                    FROM g_gpu WHERE launch_end IS NOT NULL AND corr_rank = 1) AS s
      ON s.rank = l.rank AND s.device = l.device AND s.ts_ns <= l.launch_end
    GROUP BY ALL
)
SELECT d.rank, d.device,
       i.idle_launch_med, coalesce(i.idle_launch_n, 0) AS idle_launch_n,
       g.gap_med, coalesce(g.gap_n, 0) AS gap_n,
       s.sync_med, coalesce(s.sync_n, 0) AS sync_n,
       c.launch_call_med, coalesce(c.launch_call_n, 0) AS launch_call_n,
       coalesce(q.max_queued, 0) AS max_queued
FROM devs AS d
LEFT JOIN idle AS i USING (rank, device)
LEFT JOIN gap AS g USING (rank, device)
LEFT JOIN sync AS s USING (rank, device)
LEFT JOIN lcall AS c USING (rank, device)
LEFT JOIN queued AS q USING (rank, device)
ORDER BY rank, device;
