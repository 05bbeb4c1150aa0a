-- reads: calibration_jobs, events, subclass_jobs
-- writes: none
-- collective_waits: what *synchronous* and *exposed* all-reduces cost the step, on the same
-- kind of device as job $job (lumos/estimate/comm.py). Megatron-style tensor parallelism
-- blocks the calling thread on every all-reduce, so what the step pays is not the transfer alone
-- but the caller's whole wait: handing the work to the communication thread, waiting for the
-- slowest peer, the transfer, and waking up again. Per rank, the k-th `c10d::allreduce_` is the
-- k-th collective; its blocking time runs from its start to the end of the top-level op that
-- holds it, and it was synchronous when that op ended after the work did (the k-th
-- `gloo:all_reduce` annotation). Per collective: the mean over ranks (each segment between two
-- synchronous collectives costs the step its mean compute plus the mean wait). Collectives
-- that were asynchronous on any rank (DDP buckets) are reported apart: the last one of each step
-- is *exposed* (the step waits for it before the optimizer: DDP's last bucket), and what the step
-- pays for it is its mean duration over ranks (the transfer plus the wait for the later peer).
-- Jobs in $exclude are left out.
-- Columns: group size, message elements (first input's dims), mean blocking (ns), device kind,
-- kind of sample ('sync' or 'exposed'; exposed rows carry the mean work duration over ranks),
-- job (a job with 'sync' rows runs its ranks in lock-step: lumos/estimate/contention.py).
WITH dev AS (
    SELECT kind FROM calibration_jobs($job, $exclude) WHERE is_base
), jobs AS (
    -- the waits of the base's kind of ops: a job on tensor subclasses (DTensor) waits for its
    -- peers' Python dispatch too
    SELECT job, world, kind FROM calibration_jobs($job, $exclude)
    WHERE world > 1
      AND (job IN (SELECT job FROM subclass_jobs($job, $exclude)))
          = ($job IN (SELECT job FROM subclass_jobs($job, $exclude)))
), ops AS (
    SELECT e.job, e.rank, e.tid, e.event_idx, e.name, e.input_dims, e.ts_ns,
           e.ts_ns + e.dur_ns AS end_ns
    FROM events AS e
    JOIN jobs AS j USING (job)
    WHERE j.kind = (SELECT kind FROM dev) AND e.cat = 'cpu_op' AND e.ph = 'X'
), top AS (
    SELECT job, rank, tid, ts_ns AS top_ts, end_ns AS top_end
    FROM (
        SELECT *, coalesce(ts_ns >= max(end_ns) OVER (
                   PARTITION BY job, rank, tid ORDER BY ts_ns, event_idx
                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS is_top
        FROM ops
    )
    WHERE is_top
), calls AS (
    SELECT job, rank, tid, ts_ns, input_dims,
           row_number() OVER (PARTITION BY job, rank ORDER BY ts_ns, event_idx) AS k
    FROM ops WHERE name = 'c10d::allreduce_'
), works AS (
    SELECT e.job, e.rank, e.ts_ns, e.ts_ns + e.dur_ns AS work_end, e.dur_ns AS work_ns,
           row_number() OVER (PARTITION BY e.job, e.rank ORDER BY e.ts_ns, e.event_idx) AS k
    FROM events AS e JOIN jobs AS j USING (job)
    WHERE e.cat = 'user_annotation' AND e.name = 'gloo:all_reduce'
), steps AS (
    SELECT e.job, e.rank, e.ts_ns AS step_ts
    FROM events AS e JOIN jobs AS j USING (job)
    WHERE e.cat IN ('user_annotation', 'cpu_op') AND e.name LIKE 'ProfilerStep#%'
), works_step AS (
    -- the last collective each rank starts within a step
    SELECT w.*, w.k = max(w.k) OVER (PARTITION BY w.job, w.rank, s.step_ts) AS last_in_step
    FROM works AS w
    ASOF JOIN steps AS s ON w.job = s.job AND w.rank = s.rank AND w.ts_ns >= s.step_ts
), blocking AS (
    SELECT c.job, c.rank, c.k, c.input_dims, t.top_end - c.ts_ns AS wait_ns,
           t.top_end >= w.work_end AS synchronous, w.work_ns, w.last_in_step
    FROM calls AS c
    ASOF JOIN top AS t ON c.job = t.job AND c.rank = t.rank AND c.tid = t.tid
        AND c.ts_ns >= t.top_ts
    JOIN works_step AS w ON w.job = c.job AND w.rank = c.rank AND w.k = c.k
), per AS (
    SELECT job, k, any_value(input_dims) AS input_dims, avg(wait_ns) AS wait_ns,
           avg(work_ns) AS work_ns, bool_and(synchronous) AS synchronous,
           bool_or(synchronous) AS any_synchronous, bool_and(last_in_step) AS last_in_step,
           count(*) AS n_ranks
    FROM blocking GROUP BY job, k
)
SELECT j.world AS group_size, p.input_dims,
       CASE WHEN p.synchronous THEN p.wait_ns ELSE p.work_ns END AS wait_ns,
       (SELECT kind FROM dev) AS kind,
       CASE WHEN p.synchronous THEN 'sync' ELSE 'exposed' END AS sample,
       p.job
FROM per AS p JOIN jobs AS j USING (job)
WHERE p.n_ranks = j.world AND (p.synchronous OR (NOT p.any_synchronous AND p.last_in_step))
ORDER BY 1, 2, 5;
