-- reads: iterations, tasks
-- writes: x_cls, x_cpu_step, x_it, x_task
-- x_task: every task of the job (rank, task, in that order) with the step it belongs to and its
-- class, for the explanations and the export (lumos/explain, lumos/export, which put these two
-- columns beside the task's own columns: moving names through a sort here cost more than the rest).
-- Reads the relations `tasks` and `iterations` (the replay's tables of one job, as views or
-- registered Arrow tables).
--
-- Step of a task (the rules of graph/iterations.sql):
-- * CPU task: the step whose [CPU start, next step start) holds its traced start (the last step:
--   [start, CPU end]); a CPU task outside every step has no step.
-- * GPU task: the step of its launching runtime call, never its GPU time (the GPU can run 90 ms
--   behind the CPU). A GPU task without a launch in the trace has no step: it still counts in
--   the GPU timeline (breakdown, utilisation) of whatever step's span it falls in.
-- Class `cls` of a GPU task: 1 = communication (a collective kernel, `is_comm_kernel`, or a
-- peer-to-peer copy, `is_peer_copy`: lumos_sql/taxonomy.py), 0 = compute (every other kernel,
-- memcpy and memset: they occupy the GPU and are not inter-GPU communication), NULL for CPU tasks
-- and zero-length stream-wait tasks (kind_gpu_wait()).
CREATE OR REPLACE TEMP TABLE x_it AS
SELECT rank, step, warmup, truncated, cpu_start_ns, coalesce(next_start_ns, cpu_end_ns) AS stop_ns
FROM iterations;

CREATE OR REPLACE TEMP TABLE x_cpu_step AS
SELECT t.rank, t.task, i.step
FROM (SELECT rank, task, ts_ns + origin_ns AS abs_ns FROM tasks WHERE NOT is_gpu) AS t
ASOF JOIN x_it AS i ON i.rank = t.rank AND t.abs_ns >= i.cpu_start_ns
WHERE t.abs_ns < i.stop_ns;

-- the class is decided once per distinct (kind, name): a job has a few hundred kernel names
-- for tens of thousands of GPU tasks
CREATE OR REPLACE TEMP TABLE x_cls AS
SELECT kind, name,
       CAST(CASE
           WHEN kind = kind_gpu_wait() THEN NULL
           WHEN kind = kind_collective() OR is_comm_kernel(name)
             OR (kind = kind_gpu_memcpy() AND is_peer_copy(name)) THEN 1
           ELSE 0
       END AS TINYINT) AS cls
FROM (SELECT DISTINCT kind, name FROM tasks WHERE is_gpu);

CREATE OR REPLACE TEMP TABLE x_task AS
SELECT t.rank, t.task,
       CASE WHEN t.is_gpu THEN l.step ELSE c.step END AS step,
       CASE WHEN t.is_gpu THEN k.cls END AS cls
FROM tasks AS t
LEFT JOIN x_cpu_step AS c ON c.rank = t.rank AND c.task = t.task
LEFT JOIN x_cpu_step AS l ON l.rank = t.rank AND l.task = t.launch_src
LEFT JOIN x_cls AS k ON t.is_gpu AND k.kind = t.kind AND k.name IS NOT DISTINCT FROM t.name
ORDER BY t.rank, t.task;
