"""Numba kernels over plain contiguous arrays: the replay (list scheduling) of execution graphs.

Graphs arrive as CSR arrays (int64 indices), times as int64 nanoseconds. No I/O, no pandas, no
Dagster here: callers turn warehouse tables into arrays and arrays back into tables.
"""
