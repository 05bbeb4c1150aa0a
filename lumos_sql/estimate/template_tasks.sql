-- template_tasks: the top-level CPU operators of every traced step of job $job, on the thread that
-- holds the step's ProfilerStep annotation and on any thread running autograd backward functions
-- inside the step (GPU jobs run the backward on the autograd engine's thread), labelled for the
-- estimator's graph transforms (lumos/estimate/layers.py).
--
-- Top level = not nested in an earlier op of the same thread (running max of end times).
-- Labels come from the annotations that contain the op on its thread: `layer_<i>`,
-- `forward_mb<m>` / `Forward <m>`, `backward_mb<m>` / `Backward <m>`, `optimizer` or torch's own
-- `Optimizer.step#...`, `embedding`, `lm_head`, `loss`; `mod_layer` from module names
-- (with_modules frames `nn.Module: <X>Layer_<i>` / `<X>Block_<i>`, annotations `layers.<i>`,
-- `h.<i>`, `blocks.<i>`). Traces without any of these are cut by layers.py from the op sequence.
-- A backward op (autograd evaluate_function) carries its forward op's `Sequence number`:
-- `fwd_event_idx` is the top-level forward op holding the *last* op recorded with that number in
-- the same step (ops record the counter's next value, and the op that creates the autograd node is
-- the last one before the counter moves on), so backward ops inherit the forward op's layer/role.
-- `gap_ns`: idle time before the op in the step's merged timeline (from the step start for the
-- first op; negative where threads overlap, clipped by layers.py).
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
WITH steps AS (
    SELECT rank, tid, ts_ns AS s0, ts_ns + dur_ns AS s1, name AS step_name,
           row_number() OVER (PARTITION BY rank ORDER BY ts_ns) AS step_no
    FROM job_events
    WHERE job = $job AND cat = 'user_annotation' AND name LIKE 'ProfilerStep#%'
), ops AS (
    SELECT e.rank, e.tid, e.event_idx, e.name, e.ts_ns, e.dur_ns, e.ts_ns + e.dur_ns AS end_ns,
           e.input_dims,
           try_cast(json_extract_string(e.args_json, '$."Sequence number"') AS BIGINT) AS seqno,
           s.step_no, s.s0, s.s1
    FROM job_events AS e
    JOIN steps AS s ON s.rank = e.rank AND e.ts_ns >= s.s0 AND e.ts_ns < s.s1
    WHERE e.job = $job AND e.cat = 'cpu_op' AND e.ph = 'X'
      AND (e.tid = s.tid OR e.tid IN (
          SELECT DISTINCT b.tid FROM job_events AS b
          WHERE b.job = $job AND b.rank = e.rank AND b.cat = 'cpu_op'
            AND starts_with(b.name, 'autograd::engine::evaluate_function')))
), marked AS (
    SELECT *,
           coalesce(ts_ns >= max(end_ns) OVER (
               PARTITION BY rank, tid ORDER BY ts_ns, event_idx
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS is_top
    FROM ops
), grouped AS (
    SELECT *, sum(is_top::INT) OVER (PARTITION BY rank, tid ORDER BY ts_ns, event_idx) AS grp
    FROM marked
), tops AS (
    SELECT g.*,
           first_value(event_idx) OVER top AS top_idx, first_value(name) OVER top AS top_name
    FROM grouped AS g
    WINDOW top AS (PARTITION BY rank, tid, grp ORDER BY ts_ns, event_idx)
), ann AS (
    SELECT e.rank, e.tid, e.name, e.ts_ns AS a0, e.ts_ns + e.dur_ns AS a1
    FROM job_events AS e
    WHERE e.job = $job AND e.name NOT LIKE 'ProfilerStep#%'
      AND (e.cat = 'user_annotation'
           OR (e.cat = 'python_function' AND e.name LIKE 'nn.Module: %'))
), labelled AS (
    SELECT t.rank, t.step_no, t.tid, t.event_idx, t.name, t.ts_ns, t.dur_ns, t.end_ns, t.s0, t.s1,
           t.seqno, t.input_dims,
           max(CASE WHEN regexp_matches(a.name, '^layer_[0-9]+$')
                    THEN CAST(substr(a.name, 7) AS BIGINT) END) AS layer,
           max(CASE WHEN regexp_matches(a.name, '^forward_mb[0-9]+$')
                    THEN CAST(substr(a.name, 11) AS BIGINT)
                    WHEN regexp_matches(a.name, '^Forward [0-9]+$')
                    THEN CAST(substr(a.name, 9) AS BIGINT) END) AS fwd_mb,
           max(CASE WHEN regexp_matches(a.name, '^backward_mb[0-9]+$')
                    THEN CAST(substr(a.name, 12) AS BIGINT)
                    WHEN regexp_matches(a.name, '^Backward [0-9]+$')
                    THEN CAST(substr(a.name, 10) AS BIGINT) END) AS bwd_mb,
           max(CASE WHEN regexp_matches(a.name, '^nn\.Module: \w*(Layer|Block)_[0-9]+$')
                    THEN CAST(regexp_extract(a.name, '_([0-9]+)$', 1) AS BIGINT)
                    WHEN regexp_matches(a.name,
                        '(^|[.\s])(layers|h|blocks|decoder\.layers)\.[0-9]+($|\.)')
                    THEN CAST(regexp_extract(a.name,
                        '(^|[.\s])(layers|h|blocks|decoder\.layers)\.([0-9]+)($|\.)', 3)
                        AS BIGINT) END) AS mod_layer,
           bool_or(coalesce(a.name = 'optimizer' OR starts_with(a.name, 'Optimizer.step#'),
                            false)) AS in_optimizer,
           max(CASE WHEN a.name IN ('embedding', 'lm_head', 'loss') THEN a.name END) AS part
    FROM tops AS t
    LEFT JOIN ann AS a
      ON a.rank = t.rank AND a.tid = t.tid AND a.a0 <= t.ts_ns AND a.a1 >= t.end_ns
    WHERE t.is_top
    GROUP BY ALL
), fwd_seq AS (
    -- every forward op with a sequence number -> the top-level op holding the last one
    -- (ops nested in a backward function record their node's number too: not forward ops)
    SELECT t.rank, t.step_no, t.seqno, arg_max(t.top_idx, t.ts_ns) AS fwd_event_idx
    FROM tops AS t
    WHERE t.seqno IS NOT NULL AND t.seqno >= 0 AND NOT starts_with(t.top_name, 'autograd::')
    GROUP BY ALL
)
SELECT l.rank, l.step_no, l.tid, l.event_idx, l.name, l.ts_ns - l.s0 AS rel_ns, l.dur_ns,
       l.ts_ns - coalesce(lag(l.end_ns) OVER w, l.s0) AS gap_ns,
       l.s1 - l.s0 AS step_ns, l.seqno, l.input_dims, l.layer, l.fwd_mb, l.bwd_mb,
       l.in_optimizer, l.part, l.mod_layer,
       CASE WHEN starts_with(l.name, 'autograd::') THEN f.fwd_event_idx END AS fwd_event_idx
FROM labelled AS l
LEFT JOIN fwd_seq AS f ON f.rank = l.rank AND f.step_no = l.step_no AND f.seqno = l.seqno
WINDOW w AS (PARTITION BY l.rank, l.step_no ORDER BY l.ts_ns, l.event_idx)
ORDER BY l.rank, l.step_no, l.ts_ns, l.event_idx;
