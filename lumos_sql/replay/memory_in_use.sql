-- reads: none
-- writes: none
-- What DuckDB's live tables and operators hold (bytes), and its memory limit as set.
SELECT sum(memory_usage_bytes) AS used, current_setting('memory_limit') AS memory_limit
FROM duckdb_memory();
