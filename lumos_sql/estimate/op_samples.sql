-- reads: calibration_jobs, events
-- writes: none
-- op_samples: what each operator costs at each input shape on job $job's device, from the
-- warehouse's single-rank jobs: the samples of the estimator's shape curves (GEMMs in
-- lumos/estimate/gemm_curve.py; attention and memory-bound ops in lumos/estimate/op_times.py).
-- An op's time is not proportional to its FLOPs or bytes (per-call overhead, cache blocking,
-- working sets that outgrow a cache level, fresh pages for large outputs), and the calibration
-- jobs'
-- measured ops of many shapes show the curve. Only jobs with one rank (no co-located rank slows
-- them: contention is contention.py's) and CPU devices (a GPU trace's CPU op is the launch, not the
-- work). Jobs in $exclude are left out.
-- Columns: op name, input dims (parsed in Python), job, calls, median duration (ns).
WITH jobs AS (
    SELECT job FROM calibration_jobs($job, $exclude)
    WHERE ranks = 1 AND world = 1 AND device = 'cpu'
      AND device = (SELECT device FROM calibration_jobs($job, $exclude) WHERE is_base)
), base_types AS (
    -- the ops the base runs, at its dtypes: the same shapes at another precision run other
    -- kernels, and would bend the curves the base's ops are re-timed with
    SELECT DISTINCT name, input_types FROM events WHERE job = $job AND cat = 'cpu_op'
)
SELECT e.name, e.input_dims, e.job, count(*) AS n, median(e.dur_ns) AS med_ns
FROM events AS e
JOIN jobs USING (job)
SEMI JOIN base_types AS b
  ON b.name = e.name AND b.input_types IS NOT DISTINCT FROM e.input_types
WHERE e.cat = 'cpu_op' AND e.ph = 'X' AND e.dur_ns > 0
  AND e.input_dims IS NOT NULL AND e.input_dims <> '[]'
  AND NOT borrowed_attention($job, $exclude, e.job, e.name)
GROUP BY e.name, e.input_dims, e.job
ORDER BY e.job, e.name, e.input_dims;
