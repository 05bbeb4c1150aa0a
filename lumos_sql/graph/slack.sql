-- reads: g_ext_wait, tasks
-- writes: g_slack
-- g_slack: per rank, the GPU start delays that no edge of the graph explains (a quality flag):
-- the measured external waits of graph/waits (delays above ext_wait_min_ns, lumos_sql/thresholds.py),
-- their sum and count, and the cause that holds most of that time. Run after graph/waits.
CREATE OR REPLACE TEMP TABLE g_slack AS
WITH r AS (
    SELECT DISTINCT rank FROM tasks
), by_cause AS (
    SELECT rank, cause, sum(wait_ns) AS wait_ns FROM g_ext_wait GROUP BY ALL
)
SELECT r.rank,
       CAST(coalesce(sum(b.wait_ns), 0) AS BIGINT) AS unexplained_slack_ns,
       coalesce((SELECT count(*) FROM g_ext_wait AS w WHERE w.rank = r.rank), 0) AS n_unexplained,
       arg_max(b.cause, b.wait_ns) AS wait_cause
FROM r
LEFT JOIN by_cause AS b ON b.rank = r.rank
GROUP BY r.rank;
