-- reads: critical_path, tasks
-- writes: none
-- The GPU tasks (kernels, copies: $gpu true) or CPU tasks ($gpu false) with the most time on one
-- job's critical path in the model replay: exposed time, which nothing else hid, summed by name
-- over ranks and steps.
SELECT t.name, p.exec_cat AS category, t.is_gpu,
       sum(p.exec_ns) / 1e6 AS ms,
       count(*) AS n
FROM critical_path AS p
JOIN tasks AS t ON t.job = p.job AND t.rank = p.rank AND t.task = p.task
WHERE p.job = $job AND p.mode = 'model' AND p.exec_ns > 0 AND t.is_gpu = $gpu
GROUP BY t.name, p.exec_cat, t.is_gpu
ORDER BY ms DESC, t.name
LIMIT $limit;
