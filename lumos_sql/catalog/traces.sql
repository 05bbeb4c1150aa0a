-- reads: {{traces_files}}
-- writes: traces
-- traces: the manifest, one row per (job, sha256): its latest state. Older rows of the same file
-- (history) are dropped; ties on ingested_at go to the later part file.
-- {{traces_files}}: the files of the connection's snapshot, else the glob (warehouse/snapshot.py).
CREATE OR REPLACE VIEW traces AS
SELECT * EXCLUDE (filename)
FROM read_parquet({{traces_files}}, union_by_name = true, hive_partitioning = false, filename = true)
QUALIFY row_number() OVER (PARTITION BY job, sha256 ORDER BY ingested_at DESC, filename DESC) = 1;
