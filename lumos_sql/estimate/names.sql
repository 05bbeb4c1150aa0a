-- reads: job_events
-- writes: none
-- estimate/names: annotation and module names of one job per rank: user annotations
-- (layer_<i>, forward_mb<m>, ProfilerStep#n, ...) and with_modules Python frames
-- ('nn.Module: GPT2Block_3'), loss operators, checkpoint markers and Megatron's own autograd
-- functions (taxonomy `is_megatron`), with their count and first
-- and last start.
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
SELECT
    rank,
    cat,
    name,
    count(*) AS n,
    min(ts_ns) AS first_ns,
    max(ts_ns) AS last_ns
FROM job_events
WHERE job = $job
  AND ((cat = 'user_annotation')
       OR (cat = 'python_function' AND name LIKE 'nn.Module: %')
       OR (cat = 'cpu_op' AND (lower(name) LIKE '%checkpoint%' OR name LIKE 'ProfilerStep#%'
                          OR name IN ('aten::cross_entropy_loss', 'aten::nll_loss_nd',
                                      'aten::nll_loss')
                          OR is_megatron(name))))
GROUP BY ALL
ORDER BY rank, first_ns;
