-- estimate/gemms: matrix-multiply (and embedding) operators of one job with their input shapes,
-- counted per rank.
-- aten::linear carries [input, weight[out, in], bias]; matmul/mm/addmm/bmm carry [A, B] (addmm:
-- [bias, A, B]). Shapes are parsed in Python (lumos/estimate/infer.py).
-- Forward GEMMs only, as in estimate/attention: autocast's outer call around an inner call of
-- the same op is dropped (the inner one carries the dtype the GEMM runs at), and a GEMM that runs
-- inside the autograd engine's backward is left out of `n`: the backward's own mm/addmm (whose
-- transposed shapes would read as other layer widths, compiled graphs have no linear to prefer)
-- or, for linear and matmul, a forward replayed by activation checkpointing (`n_recompute`).
WITH e AS (
    SELECT rank, tid, event_idx, name, input_dims, input_types, ts_ns, ts_ns + dur_ns AS end_ns
    FROM events
    WHERE job = $job AND cat = 'cpu_op' AND ph = 'X'
), g AS (
    SELECT *,
           coalesce(lead(ts_ns) OVER (PARTITION BY rank, tid, name
                                      ORDER BY ts_ns, end_ns DESC, event_idx) < end_ns,
                    false) AS is_outer
    FROM e
    WHERE name IN ('aten::linear', 'aten::matmul', 'aten::mm', 'aten::addmm', 'aten::bmm',
                   'aten::baddbmm', 'aten::embedding')
      AND input_dims IS NOT NULL
), bwd AS (
    SELECT rank, tid, ts_ns,
           max(end_ns) OVER (PARTITION BY rank, tid ORDER BY ts_ns, event_idx
                             ROWS UNBOUNDED PRECEDING) AS reach_ns
    FROM e
    WHERE name LIKE 'autograd::engine::evaluate_function:%'
), marked AS (
    SELECT g.rank, g.name, g.input_dims, g.input_types,
           coalesce(b.reach_ns >= g.end_ns, false) AS in_bwd
    FROM g
    ASOF LEFT JOIN bwd AS b ON b.rank = g.rank AND b.tid = g.tid AND b.ts_ns <= g.ts_ns
    WHERE NOT g.is_outer
)
SELECT
    rank,
    name,
    input_dims,
    any_value(input_types) AS input_types,
    count(*) FILTER (WHERE NOT in_bwd) AS n,
    count(*) FILTER (WHERE in_bwd AND name IN ('aten::linear', 'aten::matmul')) AS n_recompute
FROM marked
GROUP BY rank, name, input_dims
HAVING count(*) FILTER (WHERE NOT in_bwd) > 0
ORDER BY rank, n DESC, name, input_dims;
