-- reads: {{job_configs_glob}}
-- writes: job_configs
-- job_configs: each job's configuration as inferred from its trace (written by lumos sweep /
-- lumos estimate --save together with `estimates`); job_configs/vs_measured.sql pairs them
-- with the estimates.
CREATE OR REPLACE VIEW job_configs AS
SELECT *
FROM read_parquet({{job_configs_glob}}, union_by_name = true, hive_partitioning = false);
