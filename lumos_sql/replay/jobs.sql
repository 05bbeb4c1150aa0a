-- reads: traces
-- writes: none
-- every job with at least one ingested (ok) trace
SELECT DISTINCT job FROM traces WHERE status = 'ok' ORDER BY job;
