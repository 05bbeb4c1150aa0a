-- reads: traces
-- writes: none
-- the number of ranks of a job with an ingested (ok) trace. Parameter: $job.
SELECT count(DISTINCT rank) FROM traces WHERE job = $job AND status = 'ok';
