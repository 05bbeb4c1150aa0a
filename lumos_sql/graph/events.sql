-- g_ev: the complete ('X') events of one job that the execution graph is built from, with their
-- end time. Parameter: $job. Everything else in lumos_sql/graph/ reads this temp table, so one
-- job's graph is built from one scan of the warehouse.
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
    device,
    stream,
    correlation,
    CASE WHEN cat = 'cuda_sync' THEN args_json END AS args_json
FROM events
WHERE job = $job
  AND ph = 'X'
  AND ts_ns IS NOT NULL
  AND cat IN ('cpu_op', 'user_annotation', 'cuda_runtime', 'cuda_driver',
              'kernel', 'gpu_memcpy', 'gpu_memset', 'cuda_sync');
