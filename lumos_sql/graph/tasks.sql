-- reads: g_const, g_ev, g_gpu, g_groups, g_launch_step, g_rt1, g_step_gap
-- writes: g_cpu, g_devs, g_p, g_procs, g_records, g_rt_in, g_streams, g_tasks0, tasks
-- tasks: every task of the job's graph (run after graph/base and after g_const was filled).
--
-- CPU: each top-level op is cut at the runtime calls it contains, so that a launch is its own task:
-- op [a, e] holding calls [c1, d1], [c2, d2] gives pieces [a, c1], call 1, [d1, c2], call 2, [d2, e]
-- (zero-length pieces dropped). A blocking copy (its call returns after its copy ends) becomes an
-- `copy_issue` task (carries the launch; lasts min(call, the rank's median launch call)) and a
-- `copy_wait` task (waits at runtime for the copy's stream), otherwise launch + wait form a cycle.
-- GPU: kernels, memcpy, memset on their stream. Collectives (NCCL/RCCL kernels, `is_comm_kernel`) get kind_collective().
--
-- Ids: per rank, tasks are numbered by (ts, processor, end, sub): so every processor's queue is its
-- tasks in traced order, as the replay kernel requires. Processors: CPU threads first (by pid,
-- tid), then GPU streams (by device, stream); devices are numbered densely per rank.
-- `gap_ns` is the idle time before a CPU task on its thread (the start offset from the rank's
-- origin for the first task of a thread): graph/deps turns it into the replay delay.
-- `step_gap_ns` is a GPU task's inter-op gap as measured in its step on its device (g_step_gap;
-- the step of its launch): the model replay's delay after its stream predecessor. NULL where the
-- step has too few queued gaps (or the task is in no step): the device's gap_ns applies.
CREATE OR REPLACE TEMP TABLE g_rt_in AS
WITH a AS (
    -- the ASOF join over narrow rows, joined back by rowid
    SELECT r.rid, CASE WHEN r.ts_ns < g.end_ns THEN g.grp END AS grp,
           g.ts_ns AS g_ts, g.event_idx AS g_idx
    FROM (SELECT rowid AS rid, rank, pid, tid, ts_ns FROM g_rt1) AS r
    ASOF LEFT JOIN (SELECT rank, pid, tid, ts_ns, end_ns, grp, event_idx FROM g_groups) AS g
      ON g.rank = r.rank AND g.pid = r.pid AND g.tid = r.tid AND g.ts_ns <= r.ts_ns
)
SELECT r.rank, r.pid, r.tid, r.event_idx, r.ts_ns, r.end_ns, r.dur_ns, r.correlation, r.role,
       r.t_device, r.t_stream, r.l_device, r.l_ts, a.grp, a.g_ts, a.g_idx
FROM g_rt1 AS r
JOIN a ON a.rid = r.rowid;

CREATE OR REPLACE TEMP TABLE g_cpu AS
WITH pieces AS (
    SELECT rank, pid, tid, g_idx AS event_idx,
           coalesce(lag(end_ns) OVER (PARTITION BY rank, pid, tid, grp ORDER BY ts_ns, event_idx),
                    g_ts) AS ts_ns,
           ts_ns AS end_ns
    FROM g_rt_in WHERE grp IS NOT NULL
    UNION ALL
    SELECT g.rank, g.pid, g.tid, g.event_idx, coalesce(x.last_end, g.ts_ns), g.end_ns
    FROM g_groups AS g
    LEFT JOIN (SELECT rank, pid, tid, grp, max(end_ns) AS last_end
               FROM g_rt_in WHERE grp IS NOT NULL GROUP BY ALL) AS x
      USING (rank, pid, tid, grp)
), calls AS (
    SELECT r.*, c.launch_call_ns, c.sync_lat_ns,
           -- only a call longer than a launch call can be split: a kernel starting before a
           -- shorter call even began is clock skew between CPU and GPU, not an early submission
           coalesce(r.role = 'launch' AND r.dur_ns > c.launch_call_ns
                    AND r.l_ts < r.end_ns - c.launch_call_ns, FALSE) AS early
    FROM g_rt_in AS r
    LEFT JOIN g_const AS c ON c.rank = r.rank AND c.device = coalesce(r.t_device, r.l_device)
)
SELECT rank, pid, tid, event_idx, ts_ns, end_ns, 'op' AS role, 0 AS sub,
       NULL::BIGINT AS correlation, NULL::BIGINT AS t_device, NULL::BIGINT AS t_stream,
       end_ns - ts_ns AS model_dur_ns
FROM pieces WHERE end_ns > ts_ns
UNION ALL
SELECT rank, pid, tid, event_idx, ts_ns, end_ns, role, 1, correlation, t_device, t_stream,
       CASE WHEN role IN ('stream_sync', 'device_sync', 'event_sync')
            THEN least(dur_ns, coalesce(sync_lat_ns, dur_ns)) ELSE dur_ns END
FROM calls WHERE role <> 'blocking_copy' AND NOT early
UNION ALL
-- a launch call whose GPU task started more than a whole launch call (the rank's median) before
-- the call returned had submitted it long before: its first launch_call_ns carry the launch, the
-- rest of the call is a tail on its thread (trace_file_list: a 1.4 ms first call whose kernel ran
-- 12 us into it; as one task, its kernel waited for the call's end, in the identity check too).
-- A kernel starting just before its call returns says nothing of where the call's time went.
SELECT rank, pid, tid, event_idx, ts_ns, ts_ns + launch_call_ns, role, 1, correlation,
       t_device, t_stream, launch_call_ns
FROM calls WHERE early
UNION ALL
SELECT rank, pid, tid, event_idx, ts_ns + launch_call_ns, end_ns, 'runtime', 2, NULL,
       NULL, NULL, dur_ns - launch_call_ns
FROM calls WHERE early
UNION ALL
SELECT rank, pid, tid, event_idx, ts_ns,
       ts_ns + least(dur_ns, coalesce(launch_call_ns, dur_ns)), 'copy_issue', 1,
       correlation, t_device, t_stream, least(dur_ns, coalesce(launch_call_ns, dur_ns))
FROM calls WHERE role = 'blocking_copy'
UNION ALL
SELECT rank, pid, tid, event_idx, ts_ns + least(dur_ns, coalesce(launch_call_ns, dur_ns)),
       end_ns, 'copy_wait', 2, NULL, t_device, t_stream,
       least(dur_ns - least(dur_ns, coalesce(launch_call_ns, dur_ns)),
             coalesce(sync_lat_ns, dur_ns))
FROM calls WHERE role = 'blocking_copy';

-- processors and dense devices are numbered over the few distinct keys, and the task ids by a
-- window over narrow rows joined back by rowid: windows over the wide rows (names, roles) cost
-- several times more (one-rank jobs sort in one partition)
CREATE OR REPLACE TEMP TABLE g_procs AS
SELECT *, row_number() OVER (PARTITION BY rank ORDER BY is_gpu, pid, tid, device, stream) - 1 AS proc
FROM (SELECT DISTINCT rank, FALSE AS is_gpu, pid, tid, NULL::BIGINT AS device,
                      NULL::BIGINT AS stream FROM g_cpu
      UNION
      SELECT DISTINCT rank, TRUE, NULL, NULL, device, stream FROM g_gpu);

CREATE OR REPLACE TEMP TABLE g_devs AS
SELECT *, row_number() OVER (PARTITION BY rank ORDER BY device) - 1 AS dev
FROM (SELECT DISTINCT rank, device FROM g_gpu);

-- every task (CPU pieces and calls, GPU tasks) with its processor and dense device
CREATE OR REPLACE TEMP TABLE g_p AS
WITH a AS (
    SELECT rank, FALSE AS is_gpu, pid, tid, NULL::BIGINT AS device, NULL::BIGINT AS stream,
           event_idx, role, sub, ts_ns, end_ns, model_dur_ns, correlation, t_device, t_stream,
           NULL::BIGINT AS launch_corr, NULL::BIGINT AS corr_rank
    FROM g_cpu
    UNION ALL
    SELECT rank, TRUE, NULL, NULL, device, stream, event_idx,
           CASE cat WHEN 'kernel' THEN 'kernel' WHEN 'gpu_memcpy' THEN 'memcpy' ELSE 'memset' END,
           0, ts_ns, end_ns, dur_ns, NULL, device, stream, correlation, corr_rank
    FROM g_gpu
)
SELECT a.*, p.proc, CASE WHEN a.is_gpu THEN d.dev END AS dev
FROM a
JOIN g_procs AS p
  ON p.rank = a.rank AND p.is_gpu = a.is_gpu AND p.pid IS NOT DISTINCT FROM a.pid
 AND p.tid IS NOT DISTINCT FROM a.tid AND p.device IS NOT DISTINCT FROM a.device
 AND p.stream IS NOT DISTINCT FROM a.stream
LEFT JOIN g_devs AS d ON a.is_gpu AND d.rank = a.rank AND d.device IS NOT DISTINCT FROM a.device;

CREATE OR REPLACE TEMP TABLE g_tasks0 AS
WITH n AS (
    SELECT rowid AS rid,
           row_number() OVER (PARTITION BY rank ORDER BY ts_ns, proc, end_ns, sub, event_idx) - 1
               AS task
    FROM g_p
), o AS (
    SELECT rank, min(ts_ns) AS origin_ns FROM g_p GROUP BY rank
)
SELECT p.*, n.task, o.origin_ns
FROM g_p AS p
JOIN n ON n.rid = p.rowid
JOIN o ON o.rank = p.rank;

-- dense device id of each (rank, device) and processor id of each stream
CREATE OR REPLACE TEMP TABLE g_streams AS
SELECT DISTINCT rank, device, stream, proc, dev FROM g_tasks0 WHERE is_gpu;

CREATE OR REPLACE TEMP TABLE g_records AS
SELECT t.rank, t.pid, t.tid, t.ts_ns, t.task
FROM g_tasks0 AS t
JOIN g_streams AS s ON s.rank = t.rank AND s.device = t.t_device AND s.stream = t.t_stream
WHERE NOT t.is_gpu AND t.role = 'record';

CREATE OR REPLACE TEMP TABLE tasks AS
WITH ev_sync AS (
    SELECT t.rank, t.task, r.task AS record_task
    FROM (SELECT * FROM g_tasks0 WHERE role = 'event_sync') AS t
    ASOF JOIN g_records AS r
      ON r.rank = t.rank AND r.pid = t.pid AND r.tid = t.tid AND r.ts_ns < t.ts_ns
), rank_dev AS (
    SELECT rank, min(dev) AS dev FROM g_streams GROUP BY rank
), launch AS (
    SELECT g.rank, g.task AS gpu_task, c.task AS launch_task
    FROM g_tasks0 AS g
    JOIN g_tasks0 AS c
      ON c.rank = g.rank AND c.correlation = g.launch_corr AND c.role IN ('launch', 'copy_issue')
    WHERE g.is_gpu AND g.corr_rank = 1
), step_gap AS (
    SELECT g.rid, s.gap_ns AS step_gap_ns
    FROM (SELECT rowid AS rid, rank, device, launch_corr FROM g_tasks0 WHERE is_gpu) AS g
    JOIN g_launch_step AS l ON l.rank = g.rank AND l.correlation = g.launch_corr
    JOIN g_step_gap AS s ON s.rank = g.rank AND s.device = g.device AND s.step = l.step
), gap AS (
    -- idle time before each CPU task on its thread: a narrow window, joined back by rowid
    SELECT rowid AS rid,
           ts_ns - coalesce(lag(end_ns) OVER (PARTITION BY rank, proc ORDER BY task), origin_ns)
               AS gap_ns
    FROM g_tasks0 WHERE NOT is_gpu
), m AS (
    SELECT t.*, ev.name, gp.gap_ns, sg.step_gap_ns,
           s.proc AS t_proc, s.dev AS t_dev, e.record_task, rd.dev AS rank_dev
    FROM g_tasks0 AS t
    LEFT JOIN g_streams AS s
      ON s.rank = t.rank AND s.device = t.t_device AND s.stream = t.t_stream
    LEFT JOIN ev_sync AS e ON e.rank = t.rank AND e.task = t.task
    LEFT JOIN rank_dev AS rd ON rd.rank = t.rank
    LEFT JOIN gap AS gp ON gp.rid = t.rowid
    LEFT JOIN step_gap AS sg ON sg.rid = t.rowid
    -- names are carried by event_idx through the steps above and looked up once here
    LEFT JOIN g_ev AS ev ON ev.rank = t.rank AND ev.event_idx = t.event_idx
)
SELECT
    (SELECT any_value(job) FROM g_ev) AS job,
    CAST(m.rank AS INTEGER) AS rank,
    m.task,
    m.proc,
    m.is_gpu,
    m.pid, m.tid, m.device, m.stream,
    CAST(m.dev AS INTEGER) AS dev,
    m.event_idx,
    m.name,
    m.role,
    CAST(CASE
        WHEN m.role = 'op' THEN kind_cpu_op()
        WHEN m.role IN ('launch', 'copy_issue') THEN kind_launch()
        WHEN m.role IN ('stream_sync', 'device_sync', 'event_sync', 'copy_wait') THEN kind_sync()
        WHEN m.role = 'record' AND m.t_proc IS NOT NULL THEN kind_event_record()
        WHEN m.role IN ('record', 'runtime', 'stream_wait') THEN kind_runtime()
        WHEN m.role = 'kernel' AND is_comm_kernel(m.name) THEN kind_collective()
        WHEN m.role = 'kernel' THEN kind_gpu_kernel()
        WHEN m.role = 'memcpy' THEN kind_gpu_memcpy()
        ELSE kind_gpu_memset()
    END AS TINYINT) AS kind,
    m.ts_ns - m.origin_ns AS ts_ns,
    m.end_ns - m.ts_ns AS dur_ns,
    m.model_dur_ns,
    -- runtime dependency: Rt code and argument (stream processor, dense device, record task)
    CAST(CASE
        WHEN m.role IN ('stream_sync', 'copy_wait') AND m.t_proc IS NOT NULL THEN rt_stream()
        WHEN m.role = 'event_sync' AND m.record_task IS NOT NULL THEN rt_event()
        WHEN m.role IN ('device_sync', 'stream_sync', 'event_sync') AND m.rank_dev IS NOT NULL
            THEN rt_device()
        WHEN m.role = 'record' AND m.t_proc IS NOT NULL THEN rt_record()
        ELSE rt_none()
    END AS TINYINT) AS rt_mode,
    CASE
        WHEN m.role IN ('stream_sync', 'copy_wait') AND m.t_proc IS NOT NULL THEN m.t_proc
        WHEN m.role = 'event_sync' AND m.record_task IS NOT NULL THEN m.record_task
        WHEN m.role IN ('device_sync', 'stream_sync', 'event_sync') AND m.rank_dev IS NOT NULL
            THEN coalesce(m.t_dev, m.rank_dev)
        WHEN m.role = 'record' AND m.t_proc IS NOT NULL THEN m.t_proc
        ELSE -1
    END AS rt_arg,
    coalesce(l.launch_task, -1) AS launch_src,
    coalesce(m.correlation, m.launch_corr) AS correlation,
    m.gap_ns,
    m.step_gap_ns,
    m.origin_ns,
    -- a GPU task's measured external wait and its cause: filled in by graph/waits
    0::BIGINT AS ext_wait_ns,
    NULL::VARCHAR AS wait_cause
FROM m
LEFT JOIN launch AS l ON l.rank = m.rank AND l.gpu_task = m.task
ORDER BY m.rank, m.task;
