-- reads: trace_meta
-- writes: none
-- first_rank: the lowest rank of job $1 the warehouse holds (a speed-up what-if replays its step).
SELECT min(rank) AS rank
FROM trace_meta
WHERE job = $1
