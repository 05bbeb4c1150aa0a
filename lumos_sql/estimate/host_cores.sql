-- reads: calibration_jobs, trace_meta
-- writes: none
-- host_cores: the CPU cores of the host each calibration job ran on, where its recorder wrote them
-- (`lumos groundtruth`: `lumos_groundtruth.host_cores` in every trace); jobs without are left
-- out. Ranks beyond the cores time-share them, their collectives too: comm.py learns a
-- collective's cost per core it had (lumos/estimate/contention.py, `Contention.time_share`).
-- Columns: job, host_cores.
SELECT m.job, max(TRY_CAST(m.value_json ->> 'host_cores' AS INTEGER)) AS host_cores
FROM trace_meta AS m
SEMI JOIN calibration_jobs($job, $exclude) AS j ON j.job = m.job
WHERE m.key = 'lumos_groundtruth'
GROUP BY m.job
HAVING max(TRY_CAST(m.value_json ->> 'host_cores' AS INTEGER)) > 0
ORDER BY m.job;
