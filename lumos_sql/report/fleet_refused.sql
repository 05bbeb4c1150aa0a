-- reads: traces
-- writes: none
-- Ingest health: files read and refused, and the refused ones by reason (the error without the
-- file's own path, which every error names first).
SELECT status,
       CASE WHEN status = 'refused'
            THEN trim(regexp_replace(replace(coalesce(error, ''), path, ''), '^[\s:]+', ''))
       END AS reason,
       count(*) AS n_files,
       count(DISTINCT job) AS n_jobs,
       sum(size_bytes) AS bytes
FROM traces
GROUP BY ALL
ORDER BY status, n_files DESC, reason;
