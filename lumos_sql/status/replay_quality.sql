-- reads: replay_quality
-- writes: none
-- `lumos status`: per replayed job, the model replay's worst median and max error over its ranks
-- and metrics, and the largest share of a step its measured external waits take, with their
-- main cause (replay_quality; lumos_sql/graph/waits.sql; null for a replay stored before them).
SELECT job,
       max(median_rel_error) AS median_rel_error,
       max(max_rel_error) AS max_rel_error,
       max(ext_wait_share) AS ext_wait_share,
       arg_max(wait_cause, coalesce(ext_wait_share, 0)) AS wait_cause
FROM replay_quality
WHERE mode = 'model'
GROUP BY job;
