-- reads: estimates, job_configs
-- writes: none
-- One job's sweeps (and saved estimates): every configuration with its throughput and memory,
-- whether it is the job's own configuration (the base: job_configs) and whether it is on the
-- Pareto front of the sweep (no other fitting configuration has at least its tokens/s with at
-- most its memory, and more of one or less of the other); newest sweeps first.
WITH e AS (
    SELECT * FROM estimates
    WHERE job = $job AND tokens_per_s IS NOT NULL AND speedups = '{}'
), sweeps AS (
    SELECT sweep_id, max(created_at) AS created_at, count(*) AS n
    FROM e GROUP BY sweep_id
    ORDER BY created_at DESC LIMIT $max_sweeps
)
SELECT e.*,
       s.created_at AS sweep_created_at,
       s.n AS sweep_size,
       predicted_ns / 1e6 AS predicted_ms,
       memory_bytes / 1073741824.0 AS memory_gib,
       EXISTS (
           SELECT 1 FROM job_configs AS c
           WHERE c.job = e.job AND c.layers = e.layers AND c.hidden = e.hidden
             AND c.ffn = e.ffn AND c.heads = e.heads
             AND coalesce(c.kv_heads, c.heads) = coalesce(e.kv_heads, e.heads)
             AND c.seq = e.seq AND c.micro_batch = e.micro_batch
             AND c.num_micro_batches = e.num_micro_batches AND c.vocab = e.vocab
             AND c.dp = e.dp AND c.pp = e.pp AND c.tp = e.tp
             AND (c.pp = 1 OR c.pp_schedule = e.pp_schedule)
             AND c.dtype_bytes = e.dtype_bytes AND c.recompute = e.recompute
             AND c.zero_stage = e.zero_stage AND c.sequence_parallel = e.sequence_parallel
             AND c.gated_mlp = e.gated_mlp AND c.flash_attention = e.flash_attention
       ) AS is_base,
       coalesce(e.fits, TRUE) AND NOT EXISTS (
           SELECT 1 FROM e AS o
           WHERE o.sweep_id = e.sweep_id AND coalesce(o.fits, TRUE)
             AND o.tokens_per_s >= e.tokens_per_s AND o.memory_bytes <= e.memory_bytes
             AND (o.tokens_per_s > e.tokens_per_s OR o.memory_bytes < e.memory_bytes)
       ) AS pareto
FROM e JOIN sweeps AS s USING (sweep_id)
ORDER BY s.created_at DESC, e.sweep_id, e.tokens_per_s DESC;
