-- reads: jobs
-- writes: none
-- first_rank: the lowest rank of job $1 the warehouse holds (a speed-up what-if replays its step).
SELECT min_rank AS rank
FROM jobs
WHERE job = $1
