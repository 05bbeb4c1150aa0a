-- reads: {{deps}}, {{iterations}}, {{schedules}}, {{tasks}}
-- writes: deps, iterations, schedules, tasks
-- The replay tables of one job, read from the warehouse's Parquet files (lumos/explain/inputs.py).
-- Slots: {{tasks}}, {{iterations}}, {{schedules}}, {{deps}}: quoted paths of part.parquet files.
CREATE OR REPLACE TEMP VIEW tasks AS SELECT * FROM read_parquet({{tasks}});
CREATE OR REPLACE TEMP VIEW iterations AS SELECT * FROM read_parquet({{iterations}});
CREATE OR REPLACE TEMP VIEW schedules AS SELECT * FROM read_parquet({{schedules}});
CREATE OR REPLACE TEMP VIEW deps AS SELECT * FROM read_parquet({{deps}});
