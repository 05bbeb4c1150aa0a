-- reads: traces
-- writes: none
-- What a job's replay reads, per job with an ingested (ok) trace: a hash over its files (rank and
-- content hash of each), and its count of ranks. A rank added or a file re-recorded gives the job
-- another hash, so its stored replay is no longer current (lumos/replay/fleet.py).
SELECT job,
       sha256(string_agg(coalesce(CAST(rank AS VARCHAR), '-') || ':' || sha256, ','
                         ORDER BY rank, sha256)) AS inputs_sha256,
       CAST(count(DISTINCT rank) AS INTEGER) AS n_ranks
FROM traces
WHERE status = 'ok'
GROUP BY job;
