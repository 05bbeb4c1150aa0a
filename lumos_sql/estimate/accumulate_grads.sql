-- reads: job_events
-- writes: none
-- estimate/accumulate_grads: per rank of job $job, the lookups of its largest embedding table
-- ([rows, width]) and the autograd engine's accumulations of a gradient of that shape,
-- from which lumos/estimate/infer.py reads whether the LM head shares the embedding's weight.
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
WITH tables AS (
    -- the largest embedding table of each rank: [rows, width] of aten::embedding's weight
    SELECT rank,
           arg_max(CAST(json_extract(input_dims, '$[0][0]') AS BIGINT),
                   CAST(json_extract(input_dims, '$[0][0]') AS BIGINT)) AS vocab_rows,
           arg_max(CAST(json_extract(input_dims, '$[0][1]') AS BIGINT),
                   CAST(json_extract(input_dims, '$[0][0]') AS BIGINT)) AS width
    FROM job_events
    WHERE job = $job AND cat = 'cpu_op' AND name = 'aten::embedding' AND input_dims IS NOT NULL
    GROUP BY rank
)
SELECT t.rank, t.vocab_rows, t.width,
       count(*) FILTER (WHERE e.name = 'aten::embedding'
                        AND e.input_dims LIKE format('[[{}, {}]%', t.vocab_rows, t.width))
           AS lookups,
       count(*) FILTER (WHERE e.name = 'torch::autograd::AccumulateGrad'
                        AND e.input_dims = format('[[{}, {}]]', t.vocab_rows, t.width))
           AS vocab_grads
FROM tables AS t
JOIN job_events AS e ON e.rank = t.rank
WHERE e.job = $job AND e.cat = 'cpu_op'
  AND e.name IN ('aten::embedding', 'torch::autograd::AccumulateGrad')
GROUP BY ALL
ORDER BY t.rank;
