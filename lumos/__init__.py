"""The user-facing layer: the `lumos` command line and the notebook API, plus the Dagster-free
drivers that turn warehouse tables into kernel arrays and results back into tables.
"""
