-- reads: job_events
-- writes: x_calls
-- estimate/calls: the attention and matrix-multiply calls of job $job, each marked for what it
-- is, as the temp table x_calls that estimate/attention and estimate/gemms count from (run first,
-- by lumos/estimate/infer.py). Two kinds of repeated calls must not read as more layers:
--   * autocast's redispatch (`is_outer`): under torch.autocast an op is recorded twice, an outer
--     call at the caller's dtype around an inner one at the cast dtype (same name, same thread,
--     nested); the inner one holds the dtype the work runs at; so is a call on a tensor
--     subclass (`is_outer` too: a `PythonSubclass` frame inside it), whose inner calls hold the
--     local shapes that run;
--   * calls inside the autograd engine's backward (`in_bwd`: within an
--     `autograd::engine::evaluate_function: ...` span of the same thread): the backward's own
--     GEMMs, or a forward replayed by activation checkpointing.
-- Columns: rank, name, input_dims, input_types, is_attention (else a GEMM or embedding),
-- is_outer, in_bwd.
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
CREATE OR REPLACE TEMP TABLE x_calls AS
WITH e AS (
    SELECT rank, tid, event_idx, name, input_dims, input_types, ts_ns, ts_ns + dur_ns AS end_ns
    FROM job_events
    WHERE job = $job AND cat = 'cpu_op' AND ph = 'X'
), kinds AS (
    SELECT *,
           is_attention(name) AND lower(name) NOT LIKE '%backward%'
               AS is_attention
    FROM e
), calls AS (
    SELECT *,
           coalesce(lead(ts_ns) OVER (PARTITION BY rank, tid, name
                                      ORDER BY ts_ns, end_ns DESC, event_idx) < end_ns,
                    false) AS is_outer
    FROM kinds
    -- attention calls are counted with or without shapes (record_shapes off: layers from the
    -- count), GEMMs only tell something with theirs
    WHERE is_attention
       OR input_dims IS NOT NULL
          AND name IN ('aten::linear', 'aten::matmul', 'aten::mm', 'aten::addmm', 'aten::bmm',
                       'aten::baddbmm', 'aten::embedding')
), subclass AS (
    -- tensor-subclass dispatch (DTensor's tensor parallelism, float8 and quantised tensors): the
    -- op called on the subclass records the subclass's (global) shapes, and the op that runs on
    -- the local shard is recorded again under a `PythonSubclass` frame
    SELECT rank, tid, ts_ns FROM e WHERE name = 'PythonSubclass'
), bwd AS (
    -- the latest end of the backward spans started so far on each thread
    SELECT rank, tid, ts_ns,
           max(end_ns) OVER (PARTITION BY rank, tid ORDER BY ts_ns, event_idx
                             ROWS UNBOUNDED PRECEDING) AS reach_ns
    FROM e
    WHERE name LIKE 'autograd::engine::evaluate_function:%'
)
SELECT c.rank, c.name, c.input_dims, c.input_types, c.is_attention,
       c.is_outer OR coalesce(w.ts_ns < c.end_ns, false) AS is_outer,
       coalesce(b.reach_ns >= c.end_ns, false) AS in_bwd
FROM calls AS c
ASOF LEFT JOIN bwd AS b ON b.rank = c.rank AND b.tid = c.tid AND b.ts_ns <= c.ts_ns
-- the first subclass frame that starts inside the call: is the call around one?
ASOF LEFT JOIN subclass AS w ON w.rank = c.rank AND w.tid = c.tid AND w.ts_ns >= c.ts_ns;
