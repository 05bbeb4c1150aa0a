-- estimate/attention: forward attention operators of one job with their input shapes, per rank.
-- Backward ops (names with 'backward') are left out: they would double the per-layer count.
-- Two kinds of repeated calls are told apart rather than counted as layers:
--   * autocast's redispatch: under torch.autocast an op is recorded twice, an outer call at the
--     caller's dtype around an inner one at the cast dtype (same name, same thread, nested); the
--     outer call is dropped, the inner one holds the dtype the work runs at;
--   * recomputation: a forward op that runs inside the autograd engine's backward
--     (`autograd::engine::evaluate_function: ...`, where activation checkpointing replays the
--     forward) is counted in `n_recompute`, not in `n`.
WITH e AS (
    SELECT rank, tid, event_idx, name, input_dims, ts_ns, ts_ns + dur_ns AS end_ns
    FROM events
    WHERE job = $job AND cat = 'cpu_op' AND ph = 'X'
), att AS (
    SELECT *,
           coalesce(lead(ts_ns) OVER (PARTITION BY rank, tid, name
                                      ORDER BY ts_ns, end_ns DESC, event_idx) < end_ns,
                    false) AS is_outer
    FROM e
    WHERE (lower(name) LIKE '%attention%' OR lower(name) LIKE '%flash_attn%'
           OR lower(name) LIKE '%fusedattn%')
      AND lower(name) NOT LIKE '%backward%'
      AND input_dims IS NOT NULL
), bwd AS (
    -- the latest end of the backward spans started so far on each thread
    SELECT rank, tid, ts_ns,
           max(end_ns) OVER (PARTITION BY rank, tid ORDER BY ts_ns, event_idx
                             ROWS UNBOUNDED PRECEDING) AS reach_ns
    FROM e
    WHERE name LIKE 'autograd::engine::evaluate_function:%'
), marked AS (
    SELECT a.rank, a.name, a.input_dims, coalesce(b.reach_ns >= a.end_ns, false) AS in_bwd
    FROM att AS a
    ASOF LEFT JOIN bwd AS b ON b.rank = a.rank AND b.tid = a.tid AND b.ts_ns <= a.ts_ns
    WHERE NOT a.is_outer
)
SELECT
    rank,
    name,
    input_dims,
    count(*) FILTER (WHERE NOT in_bwd) AS n,
    count(*) FILTER (WHERE in_bwd) AS n_recompute
FROM marked
GROUP BY ALL
HAVING count(*) FILTER (WHERE NOT in_bwd) > 0
ORDER BY rank, n DESC, name;
