-- reads: none
-- writes: lumos_catalog
-- lumos_catalog: where this catalog's views point, so a moved warehouse can be detected and
-- its catalog rebuilt (DuckDB resolves relative paths against the working directory, not
-- against the catalog file, so the views hold absolute paths), and a hash of the SQL the views
-- were built from, so a catalog built by other code is rebuilt.
CREATE OR REPLACE TABLE lumos_catalog AS
SELECT {{root}} AS warehouse_root, now() AS built_at, {{version}} AS lumos_version,
    {{views_sha}} AS views_sha;
