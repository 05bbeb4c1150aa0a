"""The columnar trace store.

Owns everything between a raw profiler file and a queryable table: the readers that stream Kineto
JSON into Arrow batches, the one Arrow schema registry (`warehouse.schema`), the Parquet layout
(partitioned by job and rank), the manifest of what was ingested or refused, and the DuckDB catalog
of views over the Parquet. Nothing here imports Dagster.
"""
