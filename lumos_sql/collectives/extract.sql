-- reads: job_events
-- writes: none
-- collectives/extract: the collective operations of one job ($job), one row per GPU collective
-- kernel (NCCL/RCCL), with its arguments and the order key used to match it across ranks.
--
-- Arguments come from the kernel's own args when the trace has them (recent PyTorch), else from
-- the CPU ops around the runtime call that launched the kernel (linked by correlation):
-- the innermost `record_param_comms` carrying collective args, then the `nccl:<name>`
-- annotation (its Input Dims / Input type give elements and dtype, as in the 2023 DLRM traces),
-- then the `c10d::<name>_` op, then the kernel name. `args_source` says which one won.
-- Ranks without any GPU collective kernel (CPU-only / gloo captures) contribute their
-- `gloo:<name>` annotations instead, else their `record_param_comms` ops that name a
-- collective (`kind = 'cpu'`).
WITH ev AS (
    SELECT * FROM job_events WHERE job = $job  -- the job's own files (catalog/job_events.sql)
),
k AS (
    SELECT *
    FROM ev
    WHERE cat = 'kernel' AND ph = 'X'
      AND is_comm_kernel(name)
),
launch AS (
    SELECT r.rank, r.pid, r.tid, r.ts_ns, r.correlation
    FROM ev AS r
    SEMI JOIN k ON k.rank = r.rank AND k.correlation = r.correlation
    WHERE r.cat = 'cuda_runtime'
    QUALIFY row_number() OVER (PARTITION BY r.rank, r.correlation ORDER BY r.ts_ns, r.event_idx) = 1
),
comm_ops AS (
    SELECT rank, pid, tid, ts_ns, dur_ns, event_idx, name, coll_name, in_nelems, out_nelems,
           group_size, dtype, pg_name, pg_desc, pg_ranks, seq, input_dims, input_types
    FROM ev
    WHERE cat IN ('cpu_op', 'user_annotation')
      AND comm_part(name) IN ('record', 'work', 'call')
),
around AS (
    -- innermost (latest-starting) enclosing op of each kind around each launch
    SELECT
        l.rank,
        l.correlation,
        l.ts_ns AS launch_ts_ns,
        arg_max(o.coll_name, o.ts_ns) FILTER (WHERE o.name = 'record_param_comms' AND o.coll_name IS NOT NULL) AS r_coll,
        arg_max(o.in_nelems, o.ts_ns) FILTER (WHERE o.name = 'record_param_comms' AND o.coll_name IS NOT NULL) AS r_in,
        arg_max(o.out_nelems, o.ts_ns) FILTER (WHERE o.name = 'record_param_comms' AND o.coll_name IS NOT NULL) AS r_out,
        arg_max(o.group_size, o.ts_ns) FILTER (WHERE o.name = 'record_param_comms' AND o.coll_name IS NOT NULL) AS r_gs,
        arg_max(o.dtype, o.ts_ns) FILTER (WHERE o.name = 'record_param_comms' AND o.coll_name IS NOT NULL) AS r_dtype,
        arg_max(o.pg_name, o.ts_ns) FILTER (WHERE o.name = 'record_param_comms' AND o.coll_name IS NOT NULL) AS r_pg,
        arg_max(o.pg_ranks, o.ts_ns) FILTER (WHERE o.name = 'record_param_comms' AND o.coll_name IS NOT NULL) AS r_pg_ranks,
        arg_max(o.seq, o.ts_ns) FILTER (WHERE o.name = 'record_param_comms' AND o.coll_name IS NOT NULL) AS r_seq,
        arg_max(o.name, o.ts_ns) FILTER (WHERE comm_part(o.name) = 'work') AS a_name,
        arg_max(o.input_dims, o.ts_ns) FILTER (WHERE comm_part(o.name) = 'work') AS a_dims,
        arg_max(o.input_types, o.ts_ns) FILTER (WHERE comm_part(o.name) = 'work') AS a_types,
        arg_min(o.name, o.ts_ns) FILTER (WHERE comm_part(o.name) = 'call') AS c_name
    FROM launch AS l
    JOIN comm_ops AS o
        ON o.rank = l.rank AND o.pid = l.pid AND o.tid = l.tid
       AND l.ts_ns >= o.ts_ns AND l.ts_ns <= o.ts_ns + o.dur_ns
    GROUP BY l.rank, l.correlation, l.ts_ns
),
gpu AS (
    SELECT
        k.job, k.rank, k.trace_sha256, k.event_idx, 'gpu' AS kind, k.name AS kernel_name,
        k.device, k.stream, k.correlation, k.ts_ns AS start_ns, k.dur_ns,
        coalesce(l.ts_ns, k.ts_ns) AS issue_ns,
        CASE
            WHEN k.coll_name IS NOT NULL THEN 'kernel'
            WHEN a.r_coll IS NOT NULL THEN 'record_param_comms'
            WHEN a.a_name IS NOT NULL THEN 'annotation'
            WHEN a.c_name IS NOT NULL THEN 'c10d op'
            ELSE 'kernel name'
        END AS args_source,
        coalesce(
            k.coll_name, a.r_coll, substr(a.a_name, 6),
            regexp_extract(a.c_name, '^c10d::(.*?)_?$', 1),
            lower(regexp_extract(k.name, '^[nr]ccl(?:Dev)?Kernel_([A-Za-z]+)', 1))
        ) AS coll_name,
        coalesce(k.in_nelems, a.r_in,
                 CAST(list_product(TRY_CAST(json_extract(a.a_dims, '$[0]') AS BIGINT[])) AS BIGINT)
        ) AS in_nelems,
        coalesce(k.out_nelems, a.r_out) AS out_nelems,
        coalesce(k.dtype, a.r_dtype, json_extract_string(a.a_types, '$[0]')) AS dtype,
        coalesce(k.group_size, a.r_gs) AS group_size,
        coalesce(k.pg_name, a.r_pg) AS pg_name,
        coalesce(k.pg_ranks, a.r_pg_ranks) AS pg_ranks,
        coalesce(k.seq, a.r_seq) AS seq
    FROM k
    LEFT JOIN launch AS l ON l.rank = k.rank AND l.correlation = k.correlation
    LEFT JOIN around AS a ON a.rank = k.rank AND a.correlation = k.correlation
),
gloo AS (
    -- gloo runs a collective on a CPU thread: its `gloo:<name>` annotation (the backend's
    -- span of the work, comm_part 'work') spans it
    SELECT
        e.job, e.rank, e.trace_sha256, e.event_idx, 'cpu' AS kind, e.name AS kernel_name,
        NULL::BIGINT AS device, NULL::BIGINT AS stream, e.correlation, e.ts_ns AS start_ns,
        e.dur_ns, e.ts_ns AS issue_ns, 'annotation' AS args_source,
        split_part(e.name, ':', 2) AS coll_name,
        CAST(list_product(TRY_CAST(json_extract(e.input_dims, '$[0]') AS BIGINT[])) AS BIGINT)
            AS in_nelems,
        NULL::BIGINT AS out_nelems, json_extract_string(e.input_types, '$[0]') AS dtype,
        NULL::BIGINT AS group_size, NULL AS pg_name, NULL AS pg_ranks, NULL::BIGINT AS seq
    FROM ev AS e
    WHERE e.cat = 'user_annotation' AND comm_part(e.name) = 'work'
      AND e.rank NOT IN (SELECT DISTINCT rank FROM k)
),
cpu AS (
    -- CPU-only ranks without gloo annotations: the record_param_comms op is all there is
    SELECT
        e.job, e.rank, e.trace_sha256, e.event_idx, 'cpu' AS kind, e.name AS kernel_name,
        NULL::BIGINT AS device, NULL::BIGINT AS stream, e.correlation, e.ts_ns AS start_ns,
        e.dur_ns, e.ts_ns AS issue_ns, 'record_param_comms' AS args_source, e.coll_name,
        e.in_nelems, e.out_nelems, e.dtype, e.group_size, e.pg_name, e.pg_ranks, e.seq
    FROM ev AS e
    WHERE e.cat = 'cpu_op' AND e.name = 'record_param_comms' AND e.coll_name IS NOT NULL
      AND lower(e.coll_name) NOT IN ('wait', 'barrier', 'init', 'coalesced', '')
      AND e.rank NOT IN (SELECT DISTINCT rank FROM k)
      AND e.rank NOT IN (SELECT DISTINCT rank FROM gloo)
),
-- the ProfilerStep#N the collective was issued in (NULL outside every step): the matcher's
-- last resort when the order alone fits several alignments (periodic steps, windows that
-- start a step apart on two ranks)
steps AS (
    SELECT rank, ts_ns, ts_ns + dur_ns AS end_ns, TRY_CAST(substr(name, 14) AS BIGINT) AS step
    FROM ev
    -- the CPU annotation, as in graph/iterations (not its gpu_user_annotation image)
    WHERE ph = 'X' AND cat IN ('user_annotation', 'cpu_op') AND name LIKE 'ProfilerStep#%'
),
ops AS (
    SELECT * FROM gpu
    UNION ALL BY NAME
    SELECT * FROM gloo
    UNION ALL BY NAME
    SELECT * FROM cpu
)
SELECT o.*, CASE WHEN o.issue_ns < s.end_ns THEN s.step END AS step
FROM ops AS o
ASOF LEFT JOIN steps AS s ON s.rank = o.rank AND s.ts_ns <= o.issue_ns
ORDER BY o.rank, o.issue_ns, o.start_ns, o.event_idx;
