-- reads: job_events
-- writes: g_ev
-- g_ev: the complete ('X') events of one job that the execution graph is built from, with their
-- end time. Parameter: $job. Reads `job_events` (lumos_sql/catalog/job_events.sql: the job's own
-- files). Everything else in lumos_sql/graph/ reads this temp table, so one job's graph is built
-- from one scan of its files. Kernels keep the launch geometry Kineto
-- records (`blocks per SM`, `warps per SM`, `est. achieved occupancy %`): graph/deps uses it to
-- tell kernels that fill every SM for several waves (the SM-wait rule).
CREATE OR REPLACE TEMP TABLE g_ev AS
SELECT
    job,
    rank,
    event_idx,
    cat,
    name,
    pid,
    tid,
    ts_ns,
    greatest(coalesce(dur_ns, 0), 0) AS dur_ns,
    ts_ns + greatest(coalesce(dur_ns, 0), 0) AS end_ns,
    -- Kineto writes GPU work under pid = device and tid = stream; some producers (MTIA) leave the
    -- device/stream args out, so fall back to those.
    CASE WHEN cat IN ('kernel', 'gpu_memcpy', 'gpu_memset') THEN coalesce(device, pid)
         ELSE device END AS device,
    CASE WHEN cat IN ('kernel', 'gpu_memcpy', 'gpu_memset') THEN coalesce(stream, tid)
         ELSE stream END AS stream,
    correlation,
    CASE WHEN cat = 'cuda_sync' THEN args_json END AS args_json,
    TRY_CAST(geo[1] AS DOUBLE) AS blocks_per_sm,
    TRY_CAST(geo[2] AS DOUBLE) AS warps_per_sm,
    TRY_CAST(geo[3] AS DOUBLE) AS occupancy_pct
FROM (
    -- one JSON parse per kernel for its three geometry fields
    SELECT *,
           CASE WHEN cat = 'kernel'
                THEN json_extract(args_json, ['$."blocks per SM"', '$."warps per SM"',
                                              '$."est. achieved occupancy %"'])
           END AS geo
    FROM job_events
    WHERE job = $job
      AND ph = 'X'
      AND ts_ns IS NOT NULL
      AND cat IN ('cpu_op', 'user_annotation', 'cuda_runtime', 'cuda_driver',
                  'kernel', 'gpu_memcpy', 'gpu_memset', 'cuda_sync')
);
