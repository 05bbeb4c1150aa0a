"""Assets: the per-job ingestion (`trace_events`) and the one catalog writer (`warehouse_catalog`)."""
