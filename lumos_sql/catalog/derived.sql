-- reads: {{glob}}
-- writes: {{view}}
-- A table written by a later stage (replay, explanations, micro-benchmarks, estimates) as Parquet
-- files under <wh>/<name>/, each file carrying its own job/rank/device columns.
CREATE OR REPLACE VIEW {{view}} AS
SELECT *
FROM read_parquet({{glob}}, union_by_name = true, hive_partitioning = false);
