-- estimate/attention: forward attention operators of one job with their input shapes, per rank.
-- Backward ops (names with 'backward') are left out: they would double the per-layer count.
SELECT
    rank,
    name,
    input_dims,
    count(*) AS n
FROM events
WHERE job = $job
  AND cat = 'cpu_op'
  AND (lower(name) LIKE '%attention%' OR lower(name) LIKE '%flash_attn%'
       OR lower(name) LIKE '%fusedattn%')
  AND lower(name) NOT LIKE '%backward%'
  AND input_dims IS NOT NULL
GROUP BY ALL
ORDER BY rank, n DESC, name;
