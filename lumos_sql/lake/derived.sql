-- reads: {{relation}}
-- writes: {{view}}
-- A result table on an S3 warehouse (replay, explanations, estimates): the files its latest
-- rows of `<uri>/results` name (warehouse/lake_results.py), registered as the Arrow dataset
-- {{relation}} of the table's schema; what catalog/derived.sql is for a local warehouse.
CREATE OR REPLACE VIEW {{view}} AS
SELECT *
FROM {{relation}};
