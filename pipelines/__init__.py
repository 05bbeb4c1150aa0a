"""Dagster wiring only: assets, checks, partitions, sensors, schedules, resources and
`definitions.py`. Every asset calls a function from `warehouse`, `lumos` or `kernels` that works
without Dagster; nothing here holds logic a test would need Dagster to reach.
"""
