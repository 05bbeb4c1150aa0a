-- reads: lake_trace_meta, traces
-- writes: trace_meta
-- trace_meta on an S3 warehouse: the trace_meta files of the pinned manifest version's ok rows
-- (`lake_trace_meta`, an Arrow dataset), kept to the ok rows of `traces` as
-- catalog/trace_meta.sql does.
CREATE OR REPLACE VIEW trace_meta AS
SELECT m.*
FROM lake_trace_meta AS m
SEMI JOIN (SELECT job, sha256 FROM traces WHERE status = 'ok') AS t
    ON m.job = t.job AND m.trace_sha256 = t.sha256;
