-- reads: tasks
-- writes: none
-- The job whose graph tables are on the connection ('' when it has no tasks: NULL).
SELECT any_value(job) FROM tasks;
