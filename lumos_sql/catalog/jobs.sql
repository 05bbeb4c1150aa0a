-- reads: traces
-- writes: jobs
-- jobs: one row per job, what `lumos status` prints: ranks present, files ok / refused, events,
-- bytes of trace files, world size and devices (the rank's device as the reader named it).
CREATE OR REPLACE VIEW jobs AS
SELECT
    job,
    count(DISTINCT rank) FILTER (WHERE status = 'ok') AS ranks,
    min(rank) FILTER (WHERE status = 'ok') AS min_rank,
    max(rank) FILTER (WHERE status = 'ok') AS max_rank,
    max(world_size) FILTER (WHERE status = 'ok') AS world_size,
    count(*) FILTER (WHERE status = 'ok') AS files_ok,
    count(*) FILTER (WHERE status = 'refused') AS files_refused,
    coalesce(sum(n_events), 0) AS events,
    sum(size_bytes) AS bytes,
    string_agg(DISTINCT device, ', ' ORDER BY device) FILTER (WHERE status = 'ok') AS devices,
    max(ingested_at) AS last_ingested_at
FROM traces
GROUP BY job
ORDER BY job;
