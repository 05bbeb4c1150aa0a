-- reads: lake_manifest
-- writes: traces
-- traces on an S3 warehouse: the manifest's Delta table (registered as the Arrow dataset
-- `lake_manifest` at the connection's pinned version, warehouse/lake_catalog.py), one row per
-- (job, sha256): its latest state, as catalog/traces.sql keeps it for a local warehouse.
CREATE OR REPLACE VIEW traces AS
SELECT *
FROM lake_manifest
QUALIFY row_number() OVER (PARTITION BY job, sha256 ORDER BY ingested_at DESC) = 1;
