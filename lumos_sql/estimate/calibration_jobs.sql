-- reads: events, traces
-- writes: borrowed_attention, calibration_jobs, foreign_attention, subclass_jobs
-- calibration_jobs(base, excl): the warehouse's jobs an estimator query learns from, one row each:
-- the
-- base job and every job not in `excl` (an accuracy check never learns from the run it
-- predicts), with the device kind and world size the queries match jobs on. Defined as a temp
-- macro on the connection before every query in lumos_sql/estimate/
-- (lumos/estimate/calibration_sql.py),
-- so that each query states only which of these jobs it reads.
-- Columns: job, device, kind ('cpu' or 'gpu': a GPU trace's CPU op is a launch, not the work),
-- world (1 when the trace names none), ranks (distinct ranks ingested), is_base.
CREATE OR REPLACE TEMP MACRO calibration_jobs(base, excl) AS TABLE
SELECT job,
       any_value(device) AS device,
       CASE WHEN any_value(device) = 'cpu' THEN 'cpu' ELSE 'gpu' END AS kind,
       coalesce(max(world_size), 1) AS world,
       count(DISTINCT rank) AS ranks,
       any_value(job = base) AS is_base
FROM traces
WHERE status = 'ok' AND (job = base OR NOT list_contains(excl, job))
GROUP BY job;

-- foreign_attention(base, excl): the jobs of calibration_jobs(base, excl) whose attention ran
-- another
-- kernel than the base's. `aten::scaled_dot_product_attention` dispatches on arguments the op's
-- key (name, shapes, dtypes) does not hold (dropout, a mask, the backend): HuggingFace GPT-2
-- takes the math path (bmm, softmax: 5x the time) where LLaMA of the same shapes takes the
-- fused flash kernel. The kernel shows in the attention ops each job calls beneath it, so
-- their names, together, tell the implementation; a job that calls other ones must not lend
-- its attention ops' times to the base's (`borrowed_attention`). Columns: job.
CREATE OR REPLACE TEMP MACRO foreign_attention(base, excl) AS TABLE
WITH impl AS (
    SELECT job, string_agg(DISTINCT name, ',' ORDER BY name) AS names
    FROM events
    WHERE cat = 'cpu_op' AND is_attention(name) AND lower(name) NOT LIKE '%backward%'
      AND job IN (SELECT job FROM calibration_jobs(base, excl))
    GROUP BY job
)
SELECT job FROM impl
WHERE names IS DISTINCT FROM (SELECT names FROM impl WHERE job = base);

-- borrowed_attention(base, excl, op_job, op_name): an op of job `op_job` that is attention run
-- by another kernel than the base's (foreign_attention): the calibration queries leave such ops
-- out.
CREATE OR REPLACE TEMP MACRO borrowed_attention(base, excl, op_job, op_name) AS
    is_attention(op_name)
    AND op_job IN (SELECT job FROM foreign_attention(base, excl));

-- subclass_jobs(base, excl): the jobs of calibration_jobs(base, excl) whose ops run on a tensor
-- subclass (DTensor's tensor parallelism: an op on a DTensor is dispatched in Python, then run
-- again on the local shard under a `PythonSubclass` frame, at ~3x a small op's time). Their ops
-- hold that dispatch under the same names and (global) shapes as a plain job's, so they tell
-- nothing about contention, run speed or idle gaps against plain jobs: those queries leave them
-- out (and learn nothing for such a base). Columns: job.
CREATE OR REPLACE TEMP MACRO subclass_jobs(base, excl) AS TABLE
SELECT DISTINCT job FROM events
WHERE cat = 'cpu_op' AND name = 'PythonSubclass'
  AND job IN (SELECT job FROM calibration_jobs(base, excl));
