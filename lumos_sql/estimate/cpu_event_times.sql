-- reads: job_events
-- writes: none
-- cpu_event_times: the start of every CPU event the profiler recorded on rank $rank of the job
-- whose events `job_events` holds (operators, the trainer's `record_function` ranges, runtime
-- and driver calls): the events inside a CPU task of the graph, each of which cost the traced
-- run the profiler's per-event overhead (lumos/estimate/profiler_cost.py). A range is recorded
-- by the same callbacks as an operator; `python_function` frames (`with_stack`) are another
-- mechanism whose cost no run here measured, and are not counted.
SELECT tid, ts_ns
FROM job_events
WHERE rank = $rank AND ph = 'X' AND cat IN ('cpu_op', 'user_annotation', 'cuda_runtime', 'cuda_driver')
ORDER BY tid, ts_ns;
