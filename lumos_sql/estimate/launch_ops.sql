-- reads: job_events
-- writes: none
-- launch_ops: for every launching call (runtime or driver event with a correlation id) on rank
-- $rank of the job whose events `job_events` holds, the innermost CPU operator it runs in (the
-- latest-starting op of its thread whose span contains the call) with that op's input shapes:
-- the operator whose shapes set the launched kernel's work (`aten::mm` inside `aten::linear`,
-- `aten::mm` inside `MmBackward0`), for lumos/estimate/kernel_work.py.
WITH calls AS (
    SELECT tid, ts_ns, ts_ns + dur_ns AS end_ns, correlation
    FROM job_events
    WHERE rank = $rank AND ph = 'X' AND correlation IS NOT NULL
      AND cat IN ('cuda_runtime', 'cuda_driver')
), ops AS (
    SELECT tid, ts_ns, ts_ns + dur_ns AS end_ns, dur_ns, name, input_dims
    FROM job_events
    WHERE rank = $rank AND ph = 'X' AND cat = 'cpu_op'
)
SELECT c.correlation, arg_max(o.name, o.ts_ns) AS op_name,
       arg_max(o.input_dims, o.ts_ns) AS input_dims,
       -- the operator's instance (its thread and start): a GEMM's kernels share it
       hash(any_value(c.tid), max(o.ts_ns)) AS op_key
FROM calls AS c
JOIN ops AS o ON o.tid = c.tid AND o.ts_ns <= c.ts_ns AND o.end_ns >= c.end_ns
GROUP BY c.correlation;
