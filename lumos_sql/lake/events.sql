-- reads: lake_events, traces
-- writes: events
-- events on an S3 warehouse: the events files of the pinned manifest version's ok rows
-- (`lake_events`, an Arrow dataset whose `trace_sha256` is each file's name, as on a local
-- warehouse), kept to the ok rows of `traces` as catalog/events.sql does.
CREATE OR REPLACE VIEW events AS
SELECT e.*
FROM lake_events AS e
SEMI JOIN (SELECT job, sha256 FROM traces WHERE status = 'ok') AS t
    ON e.job = t.job AND e.trace_sha256 = t.sha256;
