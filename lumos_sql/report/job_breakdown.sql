-- reads: breakdown
-- writes: none
-- One job's GPU span breakdown per rank and step, the trace's own times (measured) beside the
-- replays' (model, multirank); times in ms.
SELECT rank, step, mode,
       span_ns / 1e6 AS span_ms,
       exposed_compute_ns / 1e6 AS exposed_compute_ms,
       overlapped_ns / 1e6 AS overlapped_ms,
       exposed_comm_ns / 1e6 AS exposed_comm_ms,
       idle_ns / 1e6 AS idle_ms,
       warmup, truncated
FROM breakdown
WHERE job = $job AND mode IN ('measured', 'model', 'multirank')
ORDER BY rank, step, mode;
