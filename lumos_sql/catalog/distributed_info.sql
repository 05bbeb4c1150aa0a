-- reads: trace_meta
-- writes: distributed_info
-- distributed_info: each trace's distributedInfo (backend, rank, world size, process groups).
CREATE OR REPLACE VIEW distributed_info AS
SELECT
    job,
    rank,
    trace_sha256,
    value_json ->> 'backend' AS backend,
    TRY_CAST(value_json ->> 'rank' AS BIGINT) AS declared_rank,
    TRY_CAST(value_json ->> 'world_size' AS BIGINT) AS world_size,
    TRY_CAST(value_json ->> 'pg_count' AS BIGINT) AS pg_count,
    value_json ->> 'nccl_version' AS nccl_version,
    CAST(json_extract(value_json, '$.pg_config') AS VARCHAR) AS pg_config_json,
    value_json AS distributed_info_json
FROM trace_meta
WHERE key = 'distributedInfo';
