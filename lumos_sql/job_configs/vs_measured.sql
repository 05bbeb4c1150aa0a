-- reads: estimates, events, job_configs
-- writes: estimate_vs_measured
-- estimate_vs_measured: every estimate whose configuration equals a real job's (job_configs),
-- beside that job's measured median step (the median
-- over its ProfilerStep numbers of the slowest rank's span). That step is traced: `rel_error`
-- compares it with the estimate as a trace would record it (`predicted_traced_ns`: a GPU base's
-- `predicted_ns` is the step without the profiler, its `traced_ns` the step with it). Created
-- with the job_configs view, on a local warehouse and on S3.
CREATE OR REPLACE VIEW estimate_vs_measured AS
WITH steps AS (
    SELECT job, name, max(dur_ns) AS step_ns
    FROM events
    WHERE cat IN ('user_annotation', 'cpu_op') AND name LIKE 'ProfilerStep#%'
    GROUP BY job, name
), measured AS (
    SELECT job, CAST(median(step_ns) AS BIGINT) AS measured_ns, count(*) AS n_steps,
           min(step_ns) AS measured_min_ns, max(step_ns) AS measured_max_ns
    FROM steps GROUP BY job
)
SELECT e.sweep_id, e.job AS base_job, c.job AS measured_job,
       e.layers, e.hidden, e.ffn, e.heads, e.kv_heads, e.seq, e.micro_batch, e.num_micro_batches,
       e.vocab,
       e.dp, e.pp, e.tp, e.pp_schedule,
       e.predicted_ns, e.interval_low_ns, e.interval_high_ns,
       coalesce(e.traced_ns, e.predicted_ns) AS predicted_traced_ns,
       m.measured_ns, m.n_steps, m.measured_min_ns, m.measured_max_ns,
       (coalesce(e.traced_ns, e.predicted_ns) - m.measured_ns) / m.measured_ns::DOUBLE
           AS rel_error,
       -- the interval is around predicted_ns: scaled to the traced figure
       m.measured_ns BETWEEN e.interval_low_ns * coalesce(e.traced_ns, e.predicted_ns)
                                 / e.predicted_ns::DOUBLE
                         AND e.interval_high_ns * coalesce(e.traced_ns, e.predicted_ns)
                                 / e.predicted_ns::DOUBLE AS in_interval,
       e.created_at
FROM estimates AS e
JOIN job_configs AS c
  ON  c.layers = e.layers AND c.hidden = e.hidden AND c.ffn = e.ffn AND c.heads = e.heads
  -- rows written before kv_heads existed hold null: multi-head attention
  AND coalesce(c.kv_heads, c.heads) = coalesce(e.kv_heads, e.heads)
  AND c.seq = e.seq AND c.micro_batch = e.micro_batch
  AND c.num_micro_batches = e.num_micro_batches AND c.vocab = e.vocab AND c.dp = e.dp
  AND c.pp = e.pp AND c.tp = e.tp
  AND (c.pp = 1 OR c.pp_schedule = e.pp_schedule)
  -- the keys that change the step's work or its communication, not only its memory
  AND c.dtype_bytes = e.dtype_bytes AND c.recompute = e.recompute
  AND c.zero_stage = e.zero_stage AND c.sequence_parallel = e.sequence_parallel
  AND c.gated_mlp = e.gated_mlp AND c.flash_attention = e.flash_attention
  AND coalesce(c.vocab_parallel, FALSE) = coalesce(e.vocab_parallel, FALSE)
JOIN measured AS m ON m.job = c.job
WHERE e.speedups = '{}';
