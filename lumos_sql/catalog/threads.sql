-- reads: events
-- writes: threads
-- threads: process and thread names and labels from the metadata (ph = 'M') events, one row per
-- (job, rank, pid, tid, kind); `kind` is the metadata event's name (process_name, thread_name,
-- process_labels, ...). Names are what Perfetto shows: "python3", "stream 7", "GPU 0".
CREATE OR REPLACE VIEW threads AS
SELECT
    job,
    rank,
    trace_sha256,
    pid,
    tid,
    pid_label,
    tid_label,
    name AS kind,
    any_value(coalesce(
        json_extract_string(args_json, '$.name'),
        json_extract_string(args_json, '$.labels'),
        json_extract_string(args_json, '$.sort_index')
    )) AS value
FROM events
WHERE ph = 'M'
GROUP BY ALL;
