"""Replay of execution graphs rebuilt from the warehouse.

`constants` estimates per-device replay constants from a trace, `build` packs the SQL tables
`tasks`/`deps` into `kernels.graph.ReplayGraph` arrays, `run` drives the SQL, the replay kernel and
writes the result tables. The rules and their accuracy: docs/replay.md.
"""
