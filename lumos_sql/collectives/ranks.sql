-- reads: traces
-- writes: none
-- collectives/ranks: the ranks of job $job in the warehouse and the world size each declares.
SELECT rank, max(world_size) AS world_size
FROM traces
WHERE job = $job AND status = 'ok'
GROUP BY rank
ORDER BY rank;
