-- reads: {{glob}}
-- writes: none
-- The latest replay of each job (table replay_runs, one file per job), read from its files: the
-- catalog may predate the table. Slot: {{glob}}.
SELECT job, inputs_sha256, code_sha256, status, error, explained
FROM read_parquet({{glob}}, union_by_name = true, hive_partitioning = false);
