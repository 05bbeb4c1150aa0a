-- reads: replay_runs
-- writes: none
-- One job's latest replay (replay_runs): ok or failed, and why it failed.
SELECT status, error, replayed_at
FROM replay_runs
WHERE job = $job
ORDER BY replayed_at DESC
LIMIT 1;
