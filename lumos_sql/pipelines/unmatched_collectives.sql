-- reads: collectives
-- writes: none
-- How many of one job's collectives found no peers (status 'unmatched'). Parameter: $job.
SELECT count(*) FROM collectives WHERE job = $job AND status = 'unmatched';
