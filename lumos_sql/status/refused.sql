-- reads: refused
-- writes: none
-- `lumos status`: refused files with the reason.
SELECT job, path, error FROM refused ORDER BY path;
