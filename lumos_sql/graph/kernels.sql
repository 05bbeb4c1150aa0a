-- reads: g_ev, g_gpu_t, tasks
-- writes: kernels
-- kernels: per job, GPU task name and stream: count, duration stats and the launch -> start
-- queue delay (GPU start - launch call end; negative when the GPU started before the call
-- returned). Run after graph/deps (reads g_gpu_t).
CREATE OR REPLACE TEMP TABLE kernels AS
SELECT (SELECT any_value(job) FROM g_ev) AS job,
       t.name, g.device, g.stream,
       any_value(t.role) AS role,
       count(*) AS n,
       count(g.launch_end) AS n_launched,
       CAST(sum(t.dur_ns) AS BIGINT) AS total_dur_ns,
       CAST(median(t.dur_ns) AS BIGINT) AS median_dur_ns,
       CAST(avg(t.dur_ns) AS DOUBLE) AS mean_dur_ns,
       CAST(coalesce(stddev_samp(t.dur_ns), 0) AS DOUBLE) AS std_dur_ns,
       min(t.dur_ns) AS min_dur_ns,
       max(t.dur_ns) AS max_dur_ns,
       CAST(median(g.ts_ns - g.launch_end) AS BIGINT) AS median_queue_ns,
       CAST(quantile_cont(g.ts_ns - g.launch_end, 0.9) AS BIGINT) AS p90_queue_ns
FROM g_gpu_t AS g
JOIN tasks AS t ON t.rank = g.rank AND t.task = g.task
GROUP BY t.name, g.device, g.stream
ORDER BY total_dur_ns DESC;
