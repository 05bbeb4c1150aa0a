-- reads: deps, g_const, g_gpu_t, tasks
-- writes: g_slack
-- g_slack: per rank, the GPU start delays that no edge of the graph explains (a quality flag):
-- for each GPU task, its traced start minus the latest of (launch end + launch latency + gap,
-- stream predecessor end + gap, inter-stream predecessor end + gap); delays above 2 gaps + 2 us
-- (timer_noise_ns, lumos_sql/thresholds.py) are summed. Run after graph/deps.
CREATE OR REPLACE TEMP TABLE g_slack AS
WITH sw AS (
    SELECT d.rank, d.dst AS task, max(s.ts_ns + s.dur_ns) AS sw_end
    FROM deps AS d JOIN tasks AS s ON s.rank = d.rank AND s.task = d.src
    WHERE d.kind IN ('stream_wait', 'stream_wait_inferred', 'sm_wait')
    GROUP BY ALL
), k AS (
    SELECT g.rank, c.gap_ns,
           g.ts_ns - greatest(g.launch_end + c.launch_lat_ns + c.gap_ns, g.prev_end + c.gap_ns,
                              sw.sw_end + c.gap_ns) AS late
    FROM g_gpu_t AS g
    JOIN g_const AS c ON c.rank = g.rank AND c.device = g.device
    LEFT JOIN sw ON sw.rank = g.rank AND sw.task = g.task
)
SELECT rank,
       CAST(coalesce(sum(late) FILTER (WHERE late > timer_noise_ns(gap_ns)), 0) AS BIGINT)
           AS unexplained_slack_ns,
       count(*) FILTER (WHERE late > timer_noise_ns(gap_ns)) AS n_unexplained
FROM k
GROUP BY rank;
