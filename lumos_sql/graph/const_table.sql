-- reads: g_const_in, g_step_gap_in
-- writes: g_const, g_step_gap
-- g_const: the replay constants of each rank and GPU device, as decided by
-- lumos/replay/constants.py from g_const_raw (registered by Python as the relation g_const_in).
-- g_step_gap: the inter-op gap of each profiler step on each device, from g_step_gap_raw (as
-- g_step_gap_in); a step without a row takes its device's g_const.gap_ns.
CREATE OR REPLACE TEMP TABLE g_const AS
SELECT CAST(rank AS INTEGER) AS rank, device, launch_lat_ns, gap_ns, sync_lat_ns, launch_call_ns,
       queue_depth
FROM g_const_in;

CREATE OR REPLACE TEMP TABLE g_step_gap AS
SELECT CAST(rank AS INTEGER) AS rank, device, step, gap_ns
FROM g_step_gap_in;
