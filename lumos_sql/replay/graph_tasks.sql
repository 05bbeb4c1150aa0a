-- reads: tasks
-- writes: none
-- The columns of `tasks` that the replay arrays are built from (lumos.replay.build and
-- lumos.replay.multirank), in (rank, task) order: the order `tasks` was written in (graph/tasks
-- sorts it), which a plain scan keeps (DuckDB's preserve_insertion_order); sorting again cost
-- 10 of 15 ms, and lumos.replay.run checks the order. Names and roles are left out: converting
-- those strings to Arrow costs more than building the graph.
SELECT rank, task, proc, is_gpu, dev, device, ts_ns, kind, model_dur_ns, rt_mode, rt_arg,
       launch_src, gap_ns, step_gap_ns, ext_wait_ns, event_idx, origin_ns
FROM tasks;
