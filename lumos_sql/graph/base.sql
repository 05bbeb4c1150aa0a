-- reads: g_ev
-- writes: g_gpu, g_gpu0, g_groups, g_rt0, g_rt1
-- Building blocks of the graph of the job in g_ev (run after graph/events):
--   g_groups  top-level CPU operations per thread (nested ops folded into their top-level parent)
--   g_rt      runtime calls (cudaLaunchKernel, cudaMemcpyAsync, hip*, legacy `Runtime`...), each
--             with the top-level group it sits in and what it does (launch / sync / record)
--   g_gpu     GPU tasks (kernels, memcpy, memset) per stream, with their launch and the previous
--             task of their stream
-- Ties: events are ordered by (ts, end DESC, event_idx), so a parent precedes the child that starts
-- at the same time and equal timestamps never drop a row.

-- 1. top-level ops: an op is top-level when it starts at or after the end of every earlier op of
--    its thread. A child that outlives its parent extends the group (imperfect nesting).
CREATE OR REPLACE TEMP TABLE g_groups AS
WITH o AS (
    SELECT rank, pid, tid, event_idx, name, ts_ns, end_ns,
           max(end_ns) OVER (PARTITION BY rank, pid, tid ORDER BY ts_ns, end_ns DESC, event_idx
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max_end
    FROM g_ev
    WHERE cat = 'cpu_op' AND name NOT LIKE 'ProfilerStep#%'
), f AS (
    SELECT *,
           sum(CASE WHEN prev_max_end IS NULL OR prev_max_end <= ts_ns THEN 1 ELSE 0 END)
               OVER (PARTITION BY rank, pid, tid ORDER BY ts_ns, end_ns DESC, event_idx
                     ROWS UNBOUNDED PRECEDING) AS grp
    FROM o
)
SELECT rank, pid, tid, grp,
       min(ts_ns) AS ts_ns, max(end_ns) AS end_ns,
       arg_min(event_idx, ts_ns) AS event_idx, arg_min(name, ts_ns) AS name
FROM f
GROUP BY rank, pid, tid, grp;

-- 2. GPU tasks and their launches. Several GPU tasks may share one correlation (cudaGraphLaunch):
--    the first one in time is "the" launched task, the others still depend on the call.
CREATE OR REPLACE TEMP TABLE g_gpu0 AS
SELECT rank, event_idx, cat, name, device, stream, correlation, ts_ns, end_ns, dur_ns,
       row_number() OVER (PARTITION BY rank, correlation ORDER BY ts_ns, event_idx) AS corr_rank
FROM g_ev
WHERE cat IN ('kernel', 'gpu_memcpy', 'gpu_memset') AND stream IS NOT NULL;

-- 3. runtime calls: the outermost call when calls nest; hip*, cuda*, legacy all in cuda_runtime.
--    A runtime event whose span holds the start of a top-level operator of its own thread is a
--    region around that work, not a call (MTIA's `predictor_executor::run` and `gif_merge` wrap
--    the operators they run): it is no task, the operators inside it are. Kept as a task, it
--    held its thread for its whole span and every operator inside waited for its end (an MTIA
--    capture replayed 60 % long).
CREATE OR REPLACE TEMP TABLE g_rt0 AS
WITH c AS (
    -- keys only through the ASOF join and the window; the rest is joined back by rowid
    SELECT c.rid, c.rank, c.pid, c.tid, c.event_idx, c.ts_ns, c.end_ns, n.ts_ns AS next_op_ns
    FROM (SELECT rowid AS rid, rank, pid, tid, event_idx, ts_ns, end_ns FROM g_ev
          WHERE cat IN ('cuda_runtime', 'cuda_driver')) AS c
    ASOF LEFT JOIN (SELECT rank, pid, tid, ts_ns FROM g_groups) AS n
      ON n.rank = c.rank AND n.pid = c.pid AND n.tid = c.tid AND c.ts_ns < n.ts_ns
), r AS (
    SELECT rid, ts_ns,
           max(end_ns) OVER (PARTITION BY rank, pid, tid ORDER BY ts_ns, end_ns DESC, event_idx
                             ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max_end
    FROM c
    WHERE next_op_ns IS NULL OR next_op_ns >= end_ns
)
SELECT e.rank, e.pid, e.tid, e.event_idx, e.name, e.ts_ns, e.end_ns, e.dur_ns, e.correlation,
       g.device AS l_device, g.stream AS l_stream, g.cat AS l_cat, g.name AS l_name,
       g.ts_ns AS l_ts, g.end_ns AS l_end, g.event_idx AS l_event_idx,
       lower(e.name) AS lname
FROM r
JOIN g_ev AS e ON e.rowid = r.rid
LEFT JOIN g_gpu0 AS g
  ON g.rank = e.rank AND g.correlation = e.correlation AND g.corr_rank = 1
WHERE r.prev_max_end IS NULL OR r.prev_max_end <= r.ts_ns;

-- what each call does. Syncs and records without a stream argument take the stream of the
-- thread's previous launch; `cuda_sync` events name it where the trace has them.
CREATE OR REPLACE TEMP TABLE g_rt1 AS
WITH cs AS (
    SELECT rank, correlation, any_value(name) AS sync_kind, any_value(stream) AS sync_stream,
           any_value(device) AS sync_device
    FROM g_ev WHERE cat = 'cuda_sync' GROUP BY rank, correlation
), rec_stream AS (
    -- the stream an event record was on, as named by a `Stream Wait Event` that waits for it
    SELECT rank,
           CAST(json_extract(args_json, '$.wait_on_cuda_event_record_corr_id') AS BIGINT) AS correlation,
           any_value(CAST(json_extract(args_json, '$.wait_on_stream') AS BIGINT)) AS stream
    FROM g_ev WHERE cat = 'cuda_sync' AND name = 'Stream Wait Event'
    GROUP BY ALL
), prev_launch AS (
    SELECT r.rank, r.event_idx, p.l_device, p.l_stream
    FROM g_rt0 AS r
    ASOF LEFT JOIN (SELECT rank, pid, tid, ts_ns, l_device, l_stream FROM g_rt0
                    WHERE l_stream IS NOT NULL) AS p
      ON r.rank = p.rank AND r.pid = p.pid AND r.tid = p.tid AND r.ts_ns > p.ts_ns
)
SELECT r.* EXCLUDE (name, lname, l_cat, l_name),
       CASE
           WHEN r.l_stream IS NOT NULL AND r.l_cat = 'gpu_memcpy' AND r.end_ns >= r.l_end
               THEN 'blocking_copy'
           -- a pageable copy whose call still runs after its DMA started is staging the data
           -- chunk by chunk: it returns near the copy's end (resnet legacy: a 2 ms HtoD call
           -- returning 80 us before its copy ends), so it waits like a blocking copy
           WHEN r.l_stream IS NOT NULL AND r.l_cat = 'gpu_memcpy' AND r.end_ns > r.l_ts
                AND r.l_name ILIKE '%pageable%'
               THEN 'blocking_copy'
           WHEN r.l_stream IS NOT NULL THEN 'launch'
           WHEN contains(r.lname, 'devicesynchronize') OR contains(r.lname, 'ctxsynchronize')
               THEN 'device_sync'
           WHEN contains(r.lname, 'streamsynchronize') THEN 'stream_sync'
           WHEN contains(r.lname, 'eventsynchronize') THEN 'event_sync'
           WHEN contains(r.lname, 'eventrecord') THEN 'record'
           WHEN contains(r.lname, 'streamwaitevent') THEN 'stream_wait'
           ELSE 'runtime'
       END AS role,
       coalesce(CASE WHEN cs.sync_kind = 'Stream Sync' THEN cs.sync_stream END,
                rs.stream, r.l_stream, pl.l_stream) AS t_stream,
       coalesce(cs.sync_device, r.l_device, pl.l_device) AS t_device
FROM g_rt0 AS r
LEFT JOIN cs ON cs.rank = r.rank AND cs.correlation = r.correlation
LEFT JOIN rec_stream AS rs ON rs.rank = r.rank AND rs.correlation = r.correlation
LEFT JOIN prev_launch AS pl ON pl.rank = r.rank AND pl.event_idx = r.event_idx;

-- 4. GPU tasks with their launching call and their stream predecessor
CREATE OR REPLACE TEMP TABLE g_gpu AS
SELECT g.*,
       r.event_idx AS launch_idx, r.ts_ns AS launch_ts, r.end_ns AS launch_end, r.role AS launch_role,
       lag(g.end_ns) OVER w AS prev_end,
       max(g.end_ns) OVER (PARTITION BY g.rank, g.device, g.stream ORDER BY g.ts_ns, g.event_idx
                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max_end
FROM g_gpu0 AS g
LEFT JOIN g_rt1 AS r ON r.rank = g.rank AND r.correlation = g.correlation
WINDOW w AS (PARTITION BY g.rank, g.device, g.stream ORDER BY g.ts_ns, g.event_idx);
