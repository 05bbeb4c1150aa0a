-- estimate/gemms: matrix-multiply (and embedding) operators of one job with their input shapes,
-- counted per rank.
-- aten::linear carries [input, weight[out, in], bias]; matmul/mm/addmm/bmm carry [A, B] (addmm:
-- [bias, A, B]). Shapes are parsed in Python (lumos/estimate/infer.py).
SELECT
    rank,
    name,
    input_dims,
    any_value(input_types) AS input_types,
    count(*) AS n
FROM events
WHERE job = $job
  AND cat = 'cpu_op'
  AND name IN ('aten::linear', 'aten::matmul', 'aten::mm', 'aten::addmm', 'aten::bmm',
               'aten::baddbmm', 'aten::embedding')
  AND input_dims IS NOT NULL
GROUP BY ALL
ORDER BY rank, n DESC, name, input_dims;
