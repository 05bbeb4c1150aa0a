-- reads: traces
-- writes: none
-- The ingested (ok) files of one job, by rank: what `job_events` reads. Parameter: $job.
SELECT rank, sha256 FROM traces WHERE job = $job AND status = 'ok' ORDER BY rank, sha256;
