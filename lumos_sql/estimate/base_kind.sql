-- reads: calibration_jobs
-- writes: none
-- The base job's device kind ('cpu' or 'gpu'), which picks the host prior its calibration models
-- fall
-- back on (lumos/estimate/priors.py). No row when the base is not in the warehouse.
SELECT kind FROM calibration_jobs($job, $exclude) WHERE is_base;
