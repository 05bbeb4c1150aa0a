-- reads: job_events
-- writes: none
-- template_tasks: the top-level CPU operators of every traced step of job $job, on the thread that
-- holds the step's ProfilerStep annotation and on any thread running autograd backward functions
-- inside the step (GPU jobs run the backward on the autograd engine's thread), labelled for the
-- estimator's graph transforms (lumos/estimate/template.py).
--
-- Top level = not nested in an earlier op of the same thread (running max of end times).
-- Labels come from the annotations that contain the op on its thread: `layer_<i>`,
-- `forward_mb<m>` / `Forward <m>`, `backward_mb<m>` / `Backward <m>`, `optimizer` or torch's own
-- `Optimizer.step#...`, `embedding`, `lm_head`, `loss`; `mod_layer` from module names
-- (with_modules frames `nn.Module: <X>Layer_<i>` / `<X>Block_<i>`, annotations `layers.<i>`,
-- `h.<i>`, `blocks.<i>`). Traces without any of these are cut by template.py from the op sequence.
-- A backward op (autograd evaluate_function) carries its forward op's `Sequence number`:
-- `fwd_event_idx` is the top-level forward op holding the *last* op recorded with that number in
-- the same step (ops record the counter's next value, and the op that creates the autograd node is
-- the last one before the counter moves on), so backward ops inherit the forward op's layer/role.
-- `gap_ns`: idle time before the op in the step's merged timeline (from the step start for the
-- first op; negative where threads overlap, clipped by template.py).
-- `comm_wait_ns`: the part of that gap spent waiting for a collective of the rank (gloo / NCCL
-- work on its own threads: DDP's last gradient bucket, whose wait is no op of the step's thread,
-- or a pipeline receive): the transforms re-create that wait for the target's parallel degrees,
-- so template.py takes it out of the gap. A thread waits for a collective at most once, in the
-- longest gap the collective overlaps; the short gaps between backward ops while earlier buckets
-- are reduced are not waits. (Gloo's record of an all-reduce can close milliseconds after the
-- waiting thread resumed, so its end does not mark the wait's.)
-- `comm_in_op_ns`: the duration of an op that calls a collective (`c10d::*` nested in it: a
-- tensor-parallel autograd function around its all-reduce and wait), a collective op as much as
-- a top-level `c10d::*` one; for an op that waits for a collective issued by an earlier op
-- (`*c10d_functional::wait_tensor` nested: DTensor), the wait. comm.py learns a synchronous
-- all-reduce's cost from such ops' whole blocking, and the transforms re-create it.
-- `subclass_ns`: a tensor subclass's dispatch in the op (DTensor's tensor parallelism runs every
-- op of a TP block on the DTensor, which runs it again on the local shard under a
-- `PythonSubclass` frame): the op's time outside the local ops, and all of DTensor's own
-- from_local / to_local conversions and redistributions that move no data. It is per call,
-- whatever the shapes, and a trainer runs plain tensors where it has no TP group: the estimator
-- keeps it only for targets with tp > 1.
-- `recompute_ns`: activation checkpointing's replay of a layer's forward inside a backward function
-- (torch.utils.checkpoint without reentrance runs it from the first saved tensor the backward
-- unpacks): the span of the forward-only ops nested in a backward op, ops whose names no
-- backward formula calls (linear, layer/RMS norm, attention, activations, dropout, embedding).
-- template.py takes it out of the template, and the transforms replay the forward again when the
-- target configuration recomputes (`recompute`), so a base and a target may differ in it.
-- `recompute_gap_ns`: the same for a reentrant checkpoint (`wraps` below), whose replayed ops
-- are top-level ops of the backward: they are left out, and their span is in the next op's gap.
-- Reads `job_events` (lumos_sql/catalog/job_events.sql), the job's own files: set it first.
WITH steps AS (
    SELECT rank, tid, ts_ns AS s0, ts_ns + dur_ns AS s1, name AS step_name,
           row_number() OVER (PARTITION BY rank ORDER BY ts_ns) AS step_no
    FROM job_events
    WHERE job = $job AND cat IN ('user_annotation', 'cpu_op') AND name LIKE 'ProfilerStep#%'
), ops_all AS (
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
            AND (starts_with(b.name, 'autograd::engine::evaluate_function')
                 -- PyTorch before 1.10 traced autograd nodes bare (`ReluBackward1`): their
                 -- thread is kept so that template.py can say why such a trace is refused
                 OR regexp_matches(b.name, '^[A-Z]\w*Backward\d*$'))))
), wraps AS (
    -- reentrant activation checkpointing (torch.utils.checkpoint with use_reentrant=True,
    -- Megatron's
    -- and DeepSpeed's CheckpointFunction): one autograd function runs a layer's forward inside it,
    -- and its backward replays that forward and runs the layer's backward nested inside it. The
    -- wrappers are left out, so the ops inside take their place at the top level.
    SELECT rank, tid, step_no, event_idx, name, ts_ns, end_ns, seqno,
           ends_with(name, 'Backward') AS bwd
    FROM ops_all
    WHERE regexp_matches(name, '(^|[.: ])CheckpointFunction(Backward)?$')
), ops AS (
    SELECT o.* FROM ops_all AS o
    ANTI JOIN wraps AS w ON w.rank = o.rank AND w.event_idx = o.event_idx
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
), reentrant_replay AS (
    -- the forward a reentrant checkpoint's backward replays: top-level ops inside its backward
    -- wrapper that are not backward functions; they leave the template (`recompute_gap_ns`)
    SELECT t.rank, t.tid, t.step_no, t.event_idx, t.name, t.ts_ns, t.end_ns, w.seqno AS wseq,
           w.event_idx AS wrap_idx
    FROM tops AS t
    JOIN wraps AS w
      ON w.rank = t.rank AND w.tid = t.tid AND w.bwd AND starts_with(w.name, 'autograd::')
     AND t.ts_ns >= w.ts_ns AND t.end_ns <= w.end_ns
    WHERE t.is_top AND NOT starts_with(t.name, 'autograd::')
), replay_of AS (
    -- each replayed op -> the forward op it repeats: the same wrapper (its forward and backward
    -- share the autograd node's sequence number), the same name, the same occurrence
    SELECT r.rank, r.event_idx AS replay_idx, f.event_idx AS fwd_idx
    FROM (SELECT *, row_number() OVER (PARTITION BY rank, wrap_idx, name
                                       ORDER BY ts_ns, event_idx) AS k
          FROM reentrant_replay) AS r
    JOIN (SELECT t.rank, t.step_no, t.name, t.event_idx, w.seqno AS wseq,
                 row_number() OVER (PARTITION BY t.rank, w.event_idx, t.name
                                    ORDER BY t.ts_ns, t.event_idx) AS k
          FROM tops AS t
          JOIN wraps AS w
            ON w.rank = t.rank AND w.tid = t.tid AND NOT w.bwd
           AND t.ts_ns >= w.ts_ns AND t.end_ns <= w.end_ns
          WHERE t.is_top) AS f
      ON f.rank = r.rank AND f.step_no = r.step_no AND f.wseq = r.wseq AND f.name = r.name
     AND f.k = r.k
), ann AS (
    SELECT e.rank, e.tid, e.name, e.ts_ns AS a0, e.ts_ns + e.dur_ns AS a1
    FROM job_events AS e
    WHERE e.job = $job AND e.name NOT LIKE 'ProfilerStep#%'
      AND (e.cat = 'user_annotation'
           OR (e.cat = 'python_function' AND e.name LIKE 'nn.Module: %'))
), labelled AS (
    SELECT t.rank, t.step_no, t.tid, t.grp, t.event_idx, t.name, t.ts_ns, t.dur_ns, t.end_ns,
           t.s0, t.s1, t.seqno, t.input_dims,
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
      AND NOT EXISTS (SELECT 1 FROM reentrant_replay AS r
                      WHERE r.rank = t.rank AND r.event_idx = t.event_idx)
    GROUP BY ALL
), coll AS (
    -- collective work (gloo, NCCL, MPI) of each rank, merged into disjoint busy islands
    SELECT rank, ts_ns AS a, ts_ns + dur_ns AS b,
           max(ts_ns + dur_ns) OVER (PARTITION BY rank ORDER BY ts_ns, dur_ns
                                     ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach
    FROM job_events
    WHERE job = $job AND ph = 'X' AND dur_ns > 0 AND cat IN ('user_annotation', 'cpu_op')
      AND comm_part(name) = 'work'
), islands AS (
    SELECT rank, isl, min(a) AS a, max(b) AS b
    FROM (SELECT rank, a, b,
                 sum(CASE WHEN reach IS NULL OR a > reach THEN 1 ELSE 0 END)
                     OVER (PARTITION BY rank ORDER BY a, b ROWS UNBOUNDED PRECEDING) AS isl
          FROM coll)
    GROUP BY rank, isl
), fwd_seq AS (
    -- every forward op with a sequence number -> the top-level op holding the last one
    -- (ops nested in a backward function record their node's number too: not forward ops)
    -- (a replayed op stands for the forward op it repeats)
    SELECT t.rank, t.step_no, t.seqno,
           arg_max(coalesce(m.fwd_idx, t.top_idx), t.ts_ns) AS fwd_event_idx
    FROM tops AS t
    LEFT JOIN replay_of AS m ON m.rank = t.rank AND m.replay_idx = t.top_idx
    WHERE t.seqno IS NOT NULL AND t.seqno >= 0 AND NOT starts_with(t.top_name, 'autograd::')
    GROUP BY ALL
), gapped AS (
    SELECT l.*, l.ts_ns - coalesce(lag(l.end_ns) OVER w, l.s0) AS gap_ns
    FROM labelled AS l
    WINDOW w AS (PARTITION BY l.rank, l.step_no ORDER BY l.ts_ns, l.event_idx)
), gap_coll AS (
    SELECT g.rank, g.event_idx, i.isl,
           least(i.b, g.ts_ns) - greatest(i.a, g.ts_ns - g.gap_ns) AS ov
    FROM gapped AS g
    JOIN islands AS i ON i.rank = g.rank AND i.a < g.ts_ns AND i.b > g.ts_ns - g.gap_ns
    WHERE g.gap_ns > 0
), calls_coll AS (
    -- top-level ops that call a collective inside them (a tensor-parallel autograd function's
    -- forward or backward around c10d::allreduce_ and its wait): all of the op; ops that only
    -- wait for a collective issued earlier (functional collectives, DTensor's: the op that first
    -- reads an all-reduce's output waits in `wait_tensor`): the wait
    SELECT rank, tid, grp,
           bool_or(comm_part(name) = 'call') AS calls,
           sum(dur_ns) FILTER (WHERE comm_part(name) = 'wait') AS wait_ns
    FROM tops
    WHERE NOT is_top AND comm_part(name) IN ('call', 'wait')
    GROUP BY ALL
), frames AS (
    -- tensor-subclass dispatch frames (DTensor): the ops directly inside one run on the local
    -- shard; the rest of the top-level op around them is the subclass's Python dispatch
    SELECT rank, tid, event_idx AS f_idx, ts_ns AS f0, end_ns AS f1
    FROM tops WHERE NOT is_top AND name = 'PythonSubclass'
), in_frame AS (
    -- frames do not nest (a shard is a plain tensor): an op's frame is the latest one started
    SELECT t.rank, t.tid, t.grp, f.f_idx, t.event_idx, t.name, t.ts_ns, t.end_ns, t.dur_ns,
           coalesce(t.ts_ns >= max(t.end_ns) OVER (
               PARTITION BY t.rank, t.tid, f.f_idx ORDER BY t.ts_ns, t.event_idx
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), true) AS is_child
    FROM tops AS t
    ASOF JOIN frames AS f ON f.rank = t.rank AND f.tid = t.tid AND t.ts_ns >= f.f0
    WHERE t.event_idx <> f.f_idx AND t.end_ns <= f.f1
), subclass AS (
    SELECT rank, tid, grp,
           sum(dur_ns) FILTER (WHERE is_child
                               AND comm_part(name) IS DISTINCT FROM 'wait')
               AS local_ns
    FROM in_frame GROUP BY ALL
), nested_replay AS (
    SELECT rank, tid, grp, max(end_ns) - min(ts_ns) AS recompute_ns
    FROM tops
    WHERE NOT is_top AND starts_with(top_name, 'autograd::engine::evaluate_function')
      AND name IN ('aten::linear', 'aten::layer_norm', 'aten::rms_norm', 'aten::group_norm',
                   'aten::scaled_dot_product_attention', 'aten::embedding', 'aten::gelu',
                   'aten::silu', 'aten::relu', 'aten::dropout', 'aten::softmax')
    GROUP BY ALL
), replay_gaps AS (
    -- the reentrant replay in the idle stretch before a kept op (it left the thread's ops)
    SELECT g.rank, g.event_idx, max(r.end_ns) - min(r.ts_ns) AS recompute_gap_ns
    FROM gapped AS g
    JOIN reentrant_replay AS r
      ON r.rank = g.rank AND r.step_no = g.step_no AND r.ts_ns >= g.ts_ns - g.gap_ns
     AND r.end_ns <= g.ts_ns
    WHERE g.gap_ns > 0
    GROUP BY ALL
), waits AS (
    -- a thread waits for a collective at most once: in the longest idle stretch it overlaps
    SELECT rank, event_idx, sum(ov) AS comm_wait_ns
    FROM (SELECT rank, isl, arg_max(event_idx, ov) AS event_idx, max(ov) AS ov
          FROM gap_coll GROUP BY rank, isl)
    GROUP BY ALL
)
SELECT g.rank, g.step_no, g.tid, g.event_idx, g.name, g.ts_ns - g.s0 AS rel_ns, g.dur_ns,
       g.gap_ns, coalesce(c.comm_wait_ns, 0) AS comm_wait_ns,
       CASE WHEN o.calls THEN g.dur_ns ELSE coalesce(o.wait_ns, 0) END AS comm_in_op_ns,
       coalesce(r.recompute_ns, 0) AS recompute_ns,
       CASE WHEN o.calls THEN 0
            WHEN regexp_matches(g.name,
                                '(^|[ .:])(_FromTorchTensor|_ToTorchTensor|Redistribute)(Backward)?$')
            THEN g.dur_ns
            WHEN sc.grp IS NOT NULL
            THEN greatest(g.dur_ns - coalesce(o.wait_ns, 0) - coalesce(sc.local_ns, 0), 0)
            ELSE 0 END AS subclass_ns,
       coalesce(rg.recompute_gap_ns, 0) AS recompute_gap_ns,
       g.s1 - g.s0 AS step_ns, g.seqno, g.input_dims, g.layer, g.fwd_mb, g.bwd_mb,
       g.in_optimizer, g.part, g.mod_layer,
       CASE WHEN starts_with(g.name, 'autograd::') THEN f.fwd_event_idx END AS fwd_event_idx
FROM gapped AS g
LEFT JOIN fwd_seq AS f ON f.rank = g.rank AND f.step_no = g.step_no AND f.seqno = g.seqno
LEFT JOIN waits AS c ON c.rank = g.rank AND c.event_idx = g.event_idx
LEFT JOIN calls_coll AS o ON o.rank = g.rank AND o.tid = g.tid AND o.grp = g.grp
LEFT JOIN nested_replay AS r ON r.rank = g.rank AND r.tid = g.tid AND r.grp = g.grp
LEFT JOIN subclass AS sc ON sc.rank = g.rank AND sc.tid = g.tid AND sc.grp = g.grp
LEFT JOIN replay_gaps AS rg ON rg.rank = g.rank AND rg.event_idx = g.event_idx
ORDER BY g.rank, g.step_no, g.ts_ns, g.event_idx;
