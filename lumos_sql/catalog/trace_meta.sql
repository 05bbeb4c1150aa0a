-- reads: traces, {{trace_meta_files}}
-- writes: trace_meta
-- trace_meta: each trace's top-level keys other than traceEvents (deviceProperties,
-- distributedInfo, schemaVersion, baseTimeNanoseconds, ...), the value as JSON text.
-- {{trace_meta_files}}: the files of the connection's snapshot, else the glob (warehouse/snapshot.py).
CREATE OR REPLACE VIEW trace_meta AS
SELECT m.*
FROM read_parquet({{trace_meta_files}}, union_by_name = true, hive_partitioning = false) AS m
SEMI JOIN (SELECT job, sha256 FROM traces WHERE status = 'ok') AS t
    ON m.job = t.job AND m.trace_sha256 = t.sha256;
