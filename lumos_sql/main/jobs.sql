-- reads: devices, jobs
-- writes: none
-- The main job's summary: one row per job (the catalog's `jobs` view), with the number of GPUs
-- its traces list in deviceProperties beside the device names the ranks ran on.
SELECT
    j.job,
    j.ranks,
    j.world_size,
    j.files_ok,
    j.files_refused,
    j.events,
    coalesce(d.gpus_listed, 0) AS gpus_listed,
    j.devices
FROM jobs AS j
LEFT JOIN (
    SELECT job, count(DISTINCT device_id) AS gpus_listed FROM devices GROUP BY job
) AS d USING (job)
ORDER BY j.job;
