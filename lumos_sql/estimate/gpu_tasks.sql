-- reads: job_events
-- writes: none
-- gpu_tasks: how many GPU tasks (kernels, copies, memsets) rank $rank of the job whose events
-- `job_events` holds has: none means a CPU trace, which has no GPU step graph to estimate from.
SELECT count(*) AS n
FROM job_events
WHERE rank = $rank AND cat IN ('kernel', 'gpu_memcpy', 'gpu_memset');
