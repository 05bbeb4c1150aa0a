-- reads: traces, {{events_files}}
-- writes: events
-- events: every event of every ingested rank. Only files with an `ok` manifest row are visible:
-- the manifest is the commit point, so a data file renamed in by an ingest killed before its
-- manifest row was written never shows.
-- An events file does not store trace_sha256: its name is that hash (warehouse/schema.py,
-- EVENT_FILE), the column order is the table's own (its `_schema.parquet` holds every column).
-- {{events_files}}: the files of the connection's snapshot, else the glob (warehouse/snapshot.py).
CREATE OR REPLACE VIEW events AS
SELECT e.*
FROM (
    SELECT * EXCLUDE (filename) REPLACE (parse_filename(filename, true) AS trace_sha256)
    FROM read_parquet(
        {{events_files}}, union_by_name = true, hive_partitioning = false, filename = true
    )
) AS e
SEMI JOIN (SELECT job, sha256 FROM traces WHERE status = 'ok') AS t
    ON e.job = t.job AND e.trace_sha256 = t.sha256;
