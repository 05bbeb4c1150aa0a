-- reads: refused
-- writes: none
-- status/job_refusals: a job's refused files, first by path, with the reason (an unknown job's
-- error says that its files were refused, not that it does not exist). Parameter: $job.
SELECT path, error FROM refused WHERE job = $job ORDER BY path;
