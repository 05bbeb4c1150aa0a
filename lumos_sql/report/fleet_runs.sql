-- reads: replay_runs
-- writes: none
-- Where each job's latest replay stands (replay_runs): jobs ok and failed, with an example why.
WITH latest AS (
    SELECT * FROM replay_runs
    QUALIFY row_number() OVER (PARTITION BY job ORDER BY replayed_at DESC) = 1
)
SELECT status, count(*) AS n_jobs, any_value(error) AS example_error
FROM latest
GROUP BY status
ORDER BY status;
