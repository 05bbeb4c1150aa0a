-- reads: distributed_info, job_events, trace_meta
-- writes: none
-- estimate/meta: per rank, world size and process groups (distributedInfo) and device memory
-- (deviceProperties[0].totalGlobalMem), for the parallel degrees and the memory check; the CPU
-- cores of the recording host where the recorder wrote them (`lumos groundtruth`'s
-- `lumos_groundtruth.host_cores`), for ranks that time-share them (contention.Contention).
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
SELECT
    t.rank,
    d.world_size,
    d.backend,
    d.pg_config_json,
    TRY_CAST(m.value_json -> 0 ->> 'totalGlobalMem' AS BIGINT) AS device_memory,
    m.value_json -> 0 ->> 'name' AS device_name,
    TRY_CAST(g.value_json ->> 'host_cores' AS INTEGER) AS host_cores
FROM (SELECT DISTINCT rank FROM job_events WHERE job = $job) t
LEFT JOIN distributed_info d ON d.job = $job AND d.rank = t.rank
LEFT JOIN trace_meta m ON m.job = $job AND m.rank = t.rank AND m.key = 'deviceProperties'
LEFT JOIN trace_meta g ON g.job = $job AND g.rank = t.rank AND g.key = 'lumos_groundtruth'
ORDER BY t.rank;
