-- deps: the fixed dependencies of the job's graph (run after graph/tasks), one row per edge
-- (job, rank, src, dst, kind). Processor order (same thread, same stream) is not repeated here:
-- it is the order of task ids on each `tasks.proc`. Runtime dependencies (syncs, event records)
-- are columns of `tasks` (rt_mode, rt_arg), resolved during the replay.
--
-- kind 'launch'       the runtime call -> every GPU task carrying its correlation
-- kind 'stream_wait'  inter-stream edge given by a `cuda_sync` "Stream Wait Event": the last GPU
--                     task of `wait_on_stream` launched before the event record named by
--                     `wait_on_cuda_event_record_corr_id` -> the first GPU task of the waiting
--                     stream launched after the cudaStreamWaitEvent call
-- kind 'stream_wait_inferred'  only on ranks without such events (runtime calls carry no event id):
--                     a GPU task that starts more than 2 gaps + 2 us later than its launch and its
--                     stream predecessor explain, and whose launch follows a cudaStreamWaitEvent
--                     issued since its stream's previous launch, waits for the GPU task of another
--                     stream of its device that ended last before it started, if that end is within
--                     max(20 us, 10 gaps) of its start and itself explains the delay. An edge the
--                     trace's timing contradicts (source ending after the destination starts) is
--                     never made.
-- kind 'thread'       inter-thread: a CPU task that starts a burst on its thread (first task, or
--                     after an idle gap of at least 50 us) waits for the task of another thread of
--                     the rank that ended last before it, if that end falls inside the idle gap
--                     (the forward thread's `backward()` call wakes the autograd thread; a
--                     worker's job is posted by the main thread). Only threads that run operators
--                     take part: runtime-only threads (NCCL watchdog polling) never wait or wake.
CREATE OR REPLACE TEMP TABLE g_gpu_t AS
SELECT t.rank, t.task, t.proc, t.dev, t.device, t.stream, t.ts_ns, t.ts_ns + t.dur_ns AS end_ns,
       t.correlation, c.ts_ns AS launch_ts, c.ts_ns + c.dur_ns AS launch_end, c.task AS launch_task,
       max(t.ts_ns + t.dur_ns) OVER (PARTITION BY t.rank, t.proc ORDER BY t.task
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end,
       lag(c.ts_ns) OVER (PARTITION BY t.rank, t.proc ORDER BY t.task) AS prev_launch_ts
FROM tasks AS t
LEFT JOIN tasks AS c
  ON c.rank = t.rank AND c.correlation = t.correlation AND c.role IN ('launch', 'copy_issue')
WHERE t.is_gpu;

CREATE OR REPLACE TEMP TABLE g_waits AS
SELECT e.rank, e.stream AS wait_stream, e.device,
       CAST(json_extract(e.args_json, '$.wait_on_stream') AS BIGINT) AS on_stream,
       w.ts_ns - (SELECT min(origin_ns) FROM tasks AS o WHERE o.rank = e.rank) AS wait_ts,
       r.ts_ns - (SELECT min(origin_ns) FROM tasks AS o WHERE o.rank = e.rank) AS record_ts
FROM g_ev AS e
JOIN g_rt1 AS w ON w.rank = e.rank AND w.correlation = e.correlation
JOIN g_rt1 AS r
  ON r.rank = e.rank
 AND r.correlation = CAST(json_extract(e.args_json, '$.wait_on_cuda_event_record_corr_id') AS BIGINT)
WHERE e.cat = 'cuda_sync' AND e.name = 'Stream Wait Event';

CREATE OR REPLACE TEMP TABLE g_edge_cs AS
WITH src AS (
    SELECT w.*, g.task AS src
    FROM g_waits AS w
    ASOF JOIN (SELECT * FROM g_gpu_t WHERE launch_ts IS NOT NULL) AS g
      ON g.rank = w.rank AND g.device = w.device AND g.stream = w.on_stream
     AND w.record_ts > g.launch_ts
)
SELECT s.rank, s.src, g.task AS dst
FROM src AS s
ASOF JOIN (SELECT * FROM g_gpu_t WHERE launch_ts IS NOT NULL) AS g
  ON g.rank = s.rank AND g.device = s.device AND g.stream = s.wait_stream
 AND g.launch_ts > s.wait_ts;

CREATE OR REPLACE TEMP TABLE g_edge_inf AS
WITH k AS (
    SELECT g.*, c.gap_ns, c.launch_lat_ns,
           greatest(g.launch_end + c.launch_lat_ns + c.gap_ns, g.prev_end + c.gap_ns) AS explained
    FROM g_gpu_t AS g
    JOIN g_const AS c ON c.rank = g.rank AND c.device = g.device
    WHERE g.rank NOT IN (SELECT DISTINCT rank FROM g_waits)
), late AS (
    SELECT * FROM k
    WHERE ts_ns - explained > 2 * gap_ns + 2000
      AND EXISTS (SELECT 1 FROM tasks AS w
                  WHERE w.rank = k.rank AND w.role = 'stream_wait'
                    AND w.ts_ns < k.launch_ts AND w.ts_ns >= coalesce(k.prev_launch_ts, 0))
), cand AS (
    SELECT l.rank, l.task AS dst, l.ts_ns, l.explained, l.gap_ns, s.proc AS other
    FROM late AS l
    JOIN (SELECT DISTINCT rank, dev, proc FROM g_gpu_t) AS s
      ON s.rank = l.rank AND s.dev = l.dev AND s.proc <> l.proc
), hit AS (
    SELECT c.*, g.task AS src, g.end_ns AS src_end
    FROM cand AS c
    ASOF JOIN (SELECT rank, proc, end_ns, task FROM g_gpu_t) AS g
      ON g.rank = c.rank AND g.proc = c.other AND g.end_ns <= c.ts_ns
)
SELECT rank, arg_max(src, src_end) AS src, dst
FROM hit
WHERE ts_ns - src_end <= greatest(20000, 10 * gap_ns) AND src_end + gap_ns > explained
GROUP BY rank, dst;

CREATE OR REPLACE TEMP TABLE g_edge_thread AS
WITH thr AS (
    SELECT DISTINCT rank, proc FROM tasks WHERE NOT is_gpu AND role = 'op'
), b AS (
    SELECT t.rank, t.task, t.proc, t.ts_ns, t.ts_ns - t.gap_ns AS idle_from
    FROM tasks AS t SEMI JOIN thr USING (rank, proc)
    WHERE NOT t.is_gpu
      AND (t.gap_ns >= 50000
           OR t.task = (SELECT min(x.task) FROM tasks AS x WHERE x.rank = t.rank AND x.proc = t.proc))
), cand AS (
    SELECT b.*, o.proc AS other FROM b JOIN thr AS o ON o.rank = b.rank AND o.proc <> b.proc
), hit AS (
    SELECT c.*, s.task AS src, s.end_ns AS src_end
    FROM cand AS c
    ASOF JOIN (SELECT rank, proc, ts_ns + dur_ns AS end_ns, task FROM tasks WHERE NOT is_gpu) AS s
      ON s.rank = c.rank AND s.proc = c.other AND s.end_ns <= c.ts_ns
)
SELECT rank, arg_max(src, src_end) AS src, task AS dst
FROM hit
WHERE src_end > idle_from OR (src_end >= 0 AND idle_from = 0)
GROUP BY rank, task;

CREATE OR REPLACE TEMP TABLE deps AS
SELECT (SELECT any_value(job) FROM g_ev) AS job, CAST(rank AS INTEGER) AS rank, src, dst, kind
FROM (
    SELECT rank, launch_task AS src, task AS dst, 'launch' AS kind
    FROM g_gpu_t WHERE launch_task IS NOT NULL
    UNION ALL SELECT rank, src, dst, 'stream_wait' FROM g_edge_cs
    UNION ALL SELECT rank, src, dst, 'stream_wait_inferred' FROM g_edge_inf
    UNION ALL SELECT rank, src, dst, 'thread' FROM g_edge_thread
)
ORDER BY rank, dst, src;

-- the replay delay of each CPU task: its start minus the latest of its thread predecessor's end
-- and its inter-thread predecessor's end (the idle CPU time nothing else explains)
CREATE OR REPLACE TEMP TABLE g_thread_pred AS
SELECT d.rank, d.dst AS task, max(s.ts_ns + s.dur_ns) AS pred_end
FROM deps AS d JOIN tasks AS s ON s.rank = d.rank AND s.task = d.src
WHERE d.kind = 'thread'
GROUP BY ALL;

UPDATE tasks AS t
SET gap_ns = greatest(0, t.ts_ns - greatest(p.pred_end, t.ts_ns - t.gap_ns))
FROM g_thread_pred AS p
WHERE p.rank = t.rank AND p.task = t.task;
