-- reads: x_calls
-- writes: none
-- estimate/gemms: matrix-multiply (and embedding) operators of one job with their input shapes,
-- counted per rank, from x_calls (estimate/calls, run first).
-- aten::linear carries [input, weight[out, in], bias]; matmul/mm/addmm/bmm carry [A, B] (addmm:
-- [bias, A, B]). Shapes are parsed in Python (lumos/estimate/infer.py).
-- Forward GEMMs only: autocast's outer call is dropped (the inner one carries the dtype the GEMM
-- runs at), and a GEMM inside the backward is left out of `n`: the backward's own mm/addmm
-- (whose transposed shapes would read as other layer widths; compiled graphs have no linear to
-- prefer) or, for linear and matmul, a forward replayed by activation checkpointing
-- (`n_recompute`).
SELECT
    rank,
    name,
    input_dims,
    any_value(input_types) AS input_types,
    count(*) FILTER (WHERE NOT in_bwd) AS n,
    count(*) FILTER (WHERE in_bwd AND name IN ('aten::linear', 'aten::matmul')) AS n_recompute
FROM x_calls
WHERE NOT is_attention AND NOT is_outer
GROUP BY rank, name, input_dims
HAVING count(*) FILTER (WHERE NOT in_bwd) > 0
ORDER BY rank, n DESC, name, input_dims;
