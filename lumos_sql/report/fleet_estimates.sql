-- reads: estimate_vs_measured
-- writes: none
-- Estimates of configurations some real job ran, against that job's measured median step,
-- in the order they were made (estimate_vs_measured).
SELECT created_at, measured_job, base_job, sweep_id,
       predicted_ns / 1e6 AS predicted_ms,
       measured_ns / 1e6 AS measured_ms,
       100 * rel_error AS error_pct,
       in_interval
FROM estimate_vs_measured
ORDER BY created_at, measured_job;
