-- reads: traces
-- writes: refused
-- refused: the files the warehouse refused, with the reason, newest first.
CREATE OR REPLACE VIEW refused AS
SELECT job, rank, path, error, size_bytes, sha256, ingested_at
FROM traces
WHERE status = 'refused'
ORDER BY ingested_at DESC, path;
