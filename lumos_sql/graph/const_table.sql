-- reads: g_const_in
-- writes: g_const
-- g_const: the replay constants of each rank and GPU device, as decided by
-- lumos/replay/constants.py from g_const_raw (registered by Python as the relation g_const_in).
CREATE OR REPLACE TEMP TABLE g_const AS
SELECT CAST(rank AS INTEGER) AS rank, device, launch_lat_ns, gap_ns, sync_lat_ns, launch_call_ns,
       queue_depth
FROM g_const_in;
