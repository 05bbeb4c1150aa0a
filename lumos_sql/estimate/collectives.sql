-- reads: job_events
-- writes: none
-- estimate/collectives: communication of one job per rank, grouped by operator, collective name
-- and process group: c10d ops (gloo and NCCL), record_param_comms and NCCL annotations. Kernels
-- are left out (NCCL's SendRecv kernel also carries all_to_all, so its name misleads).
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
SELECT
    rank,
    name,
    coll_name,
    group_size,
    pg_ranks,
    pg_name,
    max(in_nelems) AS in_nelems,
    any_value(input_dims) AS input_dims,
    count(*) AS n,
    min(ts_ns) AS first_ns
FROM job_events
WHERE job = $job
  AND cat IN ('cpu_op', 'user_annotation')
  AND comm_part(name) IN ('call', 'record', 'work')
GROUP BY ALL
ORDER BY rank, first_ns;
