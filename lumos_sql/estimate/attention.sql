-- reads: x_calls
-- writes: none
-- estimate/attention: forward attention operators of one job with their input shapes, per rank,
-- from x_calls (estimate/calls, run first). Backward ops are not in x_calls: they would double
-- the per-layer count. Autocast's outer calls are dropped, and forward calls that ran inside the
-- backward (activation checkpointing's replay) are counted in `n_recompute`, not in `n`.
SELECT
    rank,
    name,
    input_dims,
    count(*) FILTER (WHERE NOT in_bwd) AS n,
    count(*) FILTER (WHERE in_bwd) AS n_recompute
FROM x_calls
WHERE is_attention AND NOT is_outer
GROUP BY ALL
HAVING count(*) FILTER (WHERE NOT in_bwd) > 0
ORDER BY rank, n DESC, name;
