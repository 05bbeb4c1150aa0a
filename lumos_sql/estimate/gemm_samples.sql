-- gemm_samples: what matrix multiplies of each shape cost on job $job's device, from the
-- warehouse's single-rank jobs (lumos/estimate/gemm_fleet.py). A GEMM's efficiency grows with its
-- size (blocking, vectorisation, per-call overhead amortised), so its time is not proportional to
-- its FLOPs; the fleet's measured GEMMs of many shapes show the curve. Only the innermost GEMM ops
-- (mm, addmm, bmm, baddbmm: the library call, not the linear/matmul wrappers around it) and only
-- jobs with one rank (no co-located rank slows them: contention is fleet.py's), CPU devices only
-- (a GPU trace's CPU op is the launch, not the GEMM). Jobs in $exclude are left out.
-- Columns: op name, input dims (parsed in Python), job, calls, median duration (ns).
WITH dev AS (
    SELECT any_value(device) AS device FROM traces WHERE job = $job AND status = 'ok'
), jobs AS (
    SELECT t.job
    FROM traces AS t
    WHERE t.status = 'ok' AND NOT list_contains($exclude, t.job)
    GROUP BY t.job
    HAVING count(DISTINCT t.rank) = 1 AND coalesce(max(t.world_size), 1) = 1
       AND any_value(t.device) = (SELECT device FROM dev) AND any_value(t.device) = 'cpu'
)
SELECT e.name, e.input_dims, e.job, count(*) AS n, median(e.dur_ns) AS med_ns
FROM events AS e
JOIN jobs USING (job)
WHERE e.cat = 'cpu_op' AND e.ph = 'X' AND e.dur_ns > 0
  AND e.name IN ('aten::mm', 'aten::addmm', 'aten::bmm', 'aten::baddbmm')
  AND e.input_dims IS NOT NULL
GROUP BY ALL
ORDER BY e.job, e.name, e.input_dims;
