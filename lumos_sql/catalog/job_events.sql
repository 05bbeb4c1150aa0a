-- reads: {{files}}
-- writes: job_events
-- job_events: the events of one job, read from that job's own files (listed from the manifest by
-- warehouse/catalog.py, with the table's empty `_schema.parquet`, so the list is never empty).
-- The `events` view reads the footer of every file of the warehouse before it can filter on
-- job, which grows with the fleet; work on one job (its graph, its collectives) reads this.
-- Slot: {{files}}, a DuckDB list of quoted paths.
CREATE OR REPLACE TEMP VIEW job_events AS
-- trace_sha256 is the file's name, as in the `events` view.
SELECT * EXCLUDE (filename) REPLACE (parse_filename(filename, true) AS trace_sha256)
FROM read_parquet({{files}}, union_by_name = true, hive_partitioning = false, filename = true);
