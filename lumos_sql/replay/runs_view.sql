-- reads: replay_runs
-- writes: none
-- The latest replay of each job, from the catalog's replay_runs view (an S3 warehouse's
-- connection makes it from the results table; replay/runs_stored.sql reads a local one's files).
SELECT job, inputs_sha256, code_sha256, status, error, explained
FROM replay_runs;
