-- reads: trace_meta
-- writes: devices
-- devices: one row per device listed in a trace's deviceProperties (GPUs of the host, not only the
-- one the rank used: `device_id` is Kineto's id, which matches events.device / GPU pids).
CREATE OR REPLACE VIEW devices AS
WITH listed AS (
    SELECT job, rank, trace_sha256, unnest(CAST(value_json AS JSON[])) AS d
    FROM trace_meta
    WHERE key = 'deviceProperties' AND json_type(value_json) = 'ARRAY'
)
SELECT
    job,
    rank,
    trace_sha256,
    CAST(d ->> 'id' AS BIGINT) AS device_id,
    d ->> 'name' AS name,
    CAST(d ->> 'totalGlobalMem' AS BIGINT) AS total_global_mem,
    CAST(d ->> 'computeMajor' AS INTEGER) AS compute_major,
    CAST(d ->> 'computeMinor' AS INTEGER) AS compute_minor,
    CAST(d ->> 'numSms' AS INTEGER) AS num_sms,
    CAST(d ->> 'warpSize' AS INTEGER) AS warp_size,
    CAST(d ->> 'maxThreadsPerBlock' AS INTEGER) AS max_threads_per_block,
    CAST(d ->> 'maxThreadsPerMultiprocessor' AS INTEGER) AS max_threads_per_sm,
    CAST(d ->> 'regsPerBlock' AS BIGINT) AS regs_per_block,
    CAST(d ->> 'sharedMemPerBlock' AS BIGINT) AS shared_mem_per_block,
    CAST(coalesce(d ->> 'sharedMemPerMultiprocessor', d ->> 'maxSharedMemoryPerMultiProcessor')
        AS BIGINT) AS shared_mem_per_sm,
    CAST(d AS VARCHAR) AS properties_json
FROM listed;
