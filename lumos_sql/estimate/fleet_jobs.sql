-- fleet_jobs(base, excl): the warehouse's jobs an estimator query learns from, one row each: the
-- base job and every job not in `excl` (an accuracy check never learns from the run it
-- predicts), with the device kind and world size the queries match jobs on. Defined as a temp
-- macro on the connection before every query in lumos_sql/estimate/ (lumos/estimate/fleet_sql.py),
-- so that each query states only which of these jobs it reads.
-- Columns: job, device, kind ('cpu' or 'gpu': a GPU trace's CPU op is a launch, not the work),
-- world (1 when the trace names none), ranks (distinct ranks ingested), is_base.
CREATE OR REPLACE TEMP MACRO fleet_jobs(base, excl) AS TABLE
SELECT job,
       any_value(device) AS device,
       CASE WHEN any_value(device) = 'cpu' THEN 'cpu' ELSE 'gpu' END AS kind,
       coalesce(max(world_size), 1) AS world,
       count(DISTINCT rank) AS ranks,
       any_value(job = base) AS is_base
FROM traces
WHERE status = 'ok' AND (job = base OR NOT list_contains(excl, job))
GROUP BY job;
