-- reads: g_const, g_ev, g_rt1, tasks
-- writes: deps, g_edge_cs, g_edge_inf, g_edge_sm, g_edge_thread, g_gpu_t, g_noise, g_thread_pred,
--         g_waits,
--         tasks
-- deps: the fixed dependencies of the job's graph (run after graph/tasks), one row per edge
-- (job, rank, src, dst, kind). Processor order (same thread, same stream) is not repeated here:
-- it is the order of task ids on each `tasks.proc`. Runtime dependencies (syncs, event records)
-- are columns of `tasks` (rt_mode, rt_arg), resolved during the replay. The rules' thresholds
-- (2 gaps + 2 us of timer noise, ...) are macros named once in lumos_sql/thresholds.py.
--
-- kind 'launch'       the runtime call -> every GPU task carrying its correlation
-- kind 'stream_wait'  inter-stream edge given by a `cuda_sync` "Stream Wait Event": the last GPU
--                     task of `wait_on_stream` launched before the event record named by
--                     `wait_on_cuda_event_record_corr_id` -> the first GPU task of the waiting
--                     stream launched after the cudaStreamWaitEvent call
-- kind 'stream_wait_inferred'  only on ranks without such events (runtime calls carry no event id):
--                     a GPU task that starts more than 2 gaps + 2 us later than its launch and its
--                     stream predecessor explain, and whose launch follows a cudaStreamWaitEvent
--                     issued (on any thread) since its stream's previous launch, waits for
--                     the GPU task of another stream of its device, launched before that wait call
--                     (the event's record precedes the wait, so it can hold nothing launched
--                     later), that ended last before it started, if that end itself explains the
--                     delay. "Before it started" allows the
--                     trace's own timer noise: the
--                     largest overlap of two consecutive tasks of one stream in the rank (V100:
--                     up to 13 us; trace_diff/test has a kernel start 8 us before the 290 MB copy
--                     it waits for ends), capped at max(20 us, 10 gaps). An edge the timing
--                     contradicts beyond that noise is never made.
-- kind 'sm_wait'      SM occupancy (hardware): a kernel that fills every SM for several waves
--                     (waves = warps per SM / resident warps per SM, resident = achieved occupancy
--                     x 64 warps: 2048 threads per SM on every data-center NVIDIA GPU since
--                     Kepler, as the traces' deviceProperties say; an occupancy of 0 means Kineto
--                     could not compute it (dynamic shared memory): one resident block per SM,
--                     waves = blocks per SM) hands out its blocks before a
--                     kernel queued later on another stream gets an SM. A GPU kernel or memset
--                     that became ready (launch + latency + gap, stream predecessor + gap; one gap
--                     of tolerance) while such a kernel of another stream of its device was
--                     running, and that started
--                     only in that kernel's last waves (start >= its end - 3 waves - 10 us: the
--                     trace's timing checks the edge) and no later than its end + 2 gaps + 2 us
--                     (else something else held it), waits for it; so does a copy within the
--                     device (`is_sm_copy`: run as a kernel on the SMs). Other memcpys run on
--                     copy engines and never wait. On trace_diff/control this explains 40 of the 42.8 ms of
--                     unexplained slack (small fbgemm kernels on a side stream starting 63-94 us
--                     before a 142-wave embedding-backward kernel ends).
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

-- g_noise: per rank, the trace's own timer noise band: the largest overlap of two consecutive
-- tasks of one stream (a stream runs one task at a time, so an overlap is the clocks' disagreement)
CREATE OR REPLACE TEMP TABLE g_noise AS
SELECT rank, greatest(0, coalesce(max(prev_end - ts_ns) FILTER (WHERE prev_end > ts_ns), 0))
           AS ovl_ns
FROM g_gpu_t GROUP BY rank;

CREATE OR REPLACE TEMP TABLE g_edge_inf AS
WITH k AS (
    SELECT g.*, c.gap_ns, c.launch_lat_ns,
           least(n.ovl_ns, timer_overlap_cap_ns(c.gap_ns)) AS tol_ns,
           greatest(g.launch_end + c.launch_lat_ns + c.gap_ns, g.prev_end + c.gap_ns) AS explained
    FROM g_gpu_t AS g
    JOIN g_const AS c ON c.rank = g.rank AND c.device = g.device
    JOIN g_noise AS n ON n.rank = g.rank
    WHERE g.rank NOT IN (SELECT DISTINCT rank FROM g_waits)
), late AS (
    -- the last cudaStreamWaitEvent (any thread: it holds every later launch on its stream)
    -- before the launch, if it came after the stream's previous launch
    SELECT k.*, w.ts_ns AS wait_ts
    FROM k
    ASOF JOIN (SELECT rank, ts_ns FROM tasks WHERE role = 'stream_wait') AS w
      ON w.rank = k.rank AND w.ts_ns < k.launch_ts
    WHERE k.ts_ns - k.explained > timer_noise_ns(k.gap_ns)
      AND w.ts_ns >= coalesce(k.prev_launch_ts, 0)
), cand AS (
    SELECT l.rank, l.task AS dst, l.ts_ns, l.explained, l.gap_ns, l.tol_ns, l.wait_ts,
           s.proc AS other
    FROM late AS l
    JOIN (SELECT DISTINCT rank, dev, proc FROM g_gpu_t) AS s
      ON s.rank = l.rank AND s.dev = l.dev AND s.proc <> l.proc
), ge AS (
    -- each stream's tasks numbered by end, so that the tasks ending in a time band are a range
    -- of numbers: the band join below becomes an equi-join (a join on the stream alone pairs
    -- every late task with every task of the other stream)
    SELECT rank, proc, task, ts_ns, end_ns, launch_ts,
           row_number() OVER (PARTITION BY rank, proc ORDER BY end_ns, task) AS e_ord
    FROM g_gpu_t
), ends AS (
    SELECT rank, proc, end_ns, max(e_ord) AS e_ord FROM ge GROUP BY ALL
), band AS (
    -- tasks of the other stream ending in (explained - gap, ts + tol]: e_ord in (lo, hi]
    SELECT c.*, coalesce(lo.e_ord, 0) AS lo, hi.e_ord AS hi
    FROM cand AS c
    ASOF JOIN ends AS hi
      ON hi.rank = c.rank AND hi.proc = c.other AND hi.end_ns <= c.ts_ns + c.tol_ns
    ASOF LEFT JOIN ends AS lo
      ON lo.rank = c.rank AND lo.proc = c.other AND lo.end_ns <= c.explained - c.gap_ns
), hit AS (
    -- the event can only hold work launched before the wait call; of that work, the task that
    -- ended last before the waiting task started (within timer noise) and explains its delay.
    -- A task that started after the waiting one cannot be what it waited for, however short (a
    -- wide noise band let such a task in, and two such edges closed a cycle)
    SELECT b.*, g.task AS src, g.end_ns AS src_end
    FROM (SELECT *, unnest(range(lo + 1, hi + 1)) AS e_ord FROM band WHERE hi > lo) AS b
    JOIN ge AS g ON g.rank = b.rank AND g.proc = b.other AND g.e_ord = b.e_ord
    WHERE g.launch_ts < b.wait_ts AND g.ts_ns < b.ts_ns
)
SELECT rank, arg_max(src, src_end) AS src, dst
FROM hit
GROUP BY rank, dst;

CREATE OR REPLACE TEMP TABLE g_edge_sm AS
WITH geo AS (
    SELECT g.rank, g.task, g.proc, g.dev, g.ts_ns, g.end_ns,
           CASE WHEN e.occupancy_pct > 0 THEN e.warps_per_sm / (e.occupancy_pct / 100.0 * sm_max_warps())
                ELSE e.blocks_per_sm END AS waves
    FROM g_gpu_t AS g
    JOIN tasks AS t USING (rank, task)
    JOIN g_ev AS e ON e.rank = t.rank AND e.event_idx = t.event_idx
    WHERE t.kind IN (kind_gpu_kernel(), kind_collective()) AND e.warps_per_sm > 0 AND e.occupancy_pct >= 0
), wide AS (
    SELECT *, (end_ns - ts_ns) / waves AS wave_ns FROM geo WHERE waves >= 2
), x AS (
    SELECT g.rank, g.task, g.proc, g.dev, g.ts_ns, c.gap_ns,
           greatest(coalesce(g.launch_end + c.launch_lat_ns, 0), coalesce(g.prev_end, 0))
               + c.gap_ns AS ready
    FROM g_gpu_t AS g
    JOIN tasks AS t USING (rank, task)
    JOIN g_const AS c ON c.rank = g.rank AND c.device = g.device
    WHERE t.kind IN (kind_gpu_kernel(), kind_gpu_memset(), kind_collective())
       OR (t.kind = kind_gpu_memcpy() AND is_sm_copy(t.name))
), cand AS (
    SELECT x.*, s.proc AS other
    FROM x
    JOIN (SELECT DISTINCT rank, dev, proc FROM wide) AS s
      ON s.rank = x.rank AND s.dev = x.dev AND s.proc <> x.proc
), hit AS (
    -- the wide kernel of the other stream that started last at or before x became ready
    SELECT c.*, w.task AS src, w.ts_ns AS w_ts, w.end_ns AS w_end, w.wave_ns
    FROM cand AS c
    ASOF JOIN wide AS w
      ON w.rank = c.rank AND w.proc = c.other AND w.ts_ns <= c.ready + c.gap_ns
)
SELECT rank, arg_max(src, w_end) AS src, task AS dst
FROM hit
WHERE w_ts < ts_ns AND w_end > ready AND ts_ns >= w_end - sm_wait_tail_ns(wave_ns)
  AND ts_ns <= w_end + timer_noise_ns(gap_ns)
GROUP BY rank, task;

CREATE OR REPLACE TEMP TABLE g_edge_thread AS
WITH thr AS (
    SELECT DISTINCT rank, proc FROM tasks WHERE NOT is_gpu AND role = 'op'
), b AS (
    SELECT t.rank, t.task, t.proc, t.ts_ns, t.ts_ns - t.gap_ns AS idle_from
    FROM tasks AS t SEMI JOIN thr USING (rank, proc)
    WHERE NOT t.is_gpu
      AND (t.gap_ns >= thread_wake_gap_ns()
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
    UNION ALL SELECT rank, src, dst, 'sm_wait' FROM g_edge_sm
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
