-- reads: traces
-- writes: none
-- estimate/known_jobs: the jobs the warehouse holds a readable trace of (an unknown job's error
-- names them).
SELECT DISTINCT job FROM traces WHERE status = 'ok' ORDER BY 1;
