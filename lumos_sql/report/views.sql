-- reads: duckdb_views
-- writes: none
-- The catalog's views (a derived table's view exists only once something wrote it): the report
-- leaves out the sections whose tables this warehouse does not hold.
SELECT view_name FROM duckdb_views() WHERE NOT internal ORDER BY view_name;
