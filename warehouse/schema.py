"""The one Arrow schema registry. Every table the warehouse writes is declared here and only here.

Times are int64 nanoseconds, parsed exactly from the JSON text (float64 drops ns digits at epoch
scale). `job` and `rank` are stored inside every file as well as in the directory
names, so a Parquet file is self-describing when it is copied out of the warehouse.
"""

from __future__ import annotations

import pyarrow as pa

# Kineto categories are normalised across schema versions (legacy 2021, AMD, MTIA) to these names;
# the raw category is kept in `cat_raw`.
CATEGORY_ALIASES: dict[str, str] = {
    "Operator": "cpu_op",
    "Runtime": "cuda_runtime",
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "async": "ac2g",
    "async_gpu": "ac2g",
    "async_cpu_to_gpu": "ac2g",
    "Trace": "trace",
    "hip_runtime": "cuda_runtime",
    "mtia_runtime": "cuda_runtime",
    # the host-side runtime and driver calls of Intel GPUs and of out-of-tree backends (Kineto's
    # XPU_RUNTIME / PRIVATEUSE1_RUNTIME activity types): a launch is matched to its device work
    # by correlation, as on CUDA
    "xpu_runtime": "cuda_runtime",
    "xpu_driver": "cuda_driver",
    "privateuse1_runtime": "cuda_runtime",
    "privateuse1_driver": "cuda_driver",
    "mtia_ccp_events": "kernel",
}

# Columns the readers produce, in order. The store prepends job, rank and trace_sha256.
EVENT_FIELDS: list[pa.Field] = [
    pa.field("event_idx", pa.int64(), nullable=False),  # position in the file: the stable tie-break
    pa.field("cat", pa.string()),  # normalised category ('' for metadata events without one)
    pa.field("cat_raw", pa.string()),
    pa.field("ph", pa.string()),
    pa.field("name", pa.string()),
    pa.field("pid", pa.int64()),
    pa.field("tid", pa.int64()),
    pa.field("pid_label", pa.string()),  # original pid/tid when it was not an integer ("stream 7")
    pa.field("tid_label", pa.string()),
    pa.field("ts_ns", pa.int64()),
    pa.field("dur_ns", pa.int64()),
    pa.field("device", pa.int64()),
    pa.field("stream", pa.int64()),
    pa.field("correlation", pa.int64()),
    pa.field("external_id", pa.int64()),
    pa.field("flow_id", pa.int64()),  # `id` of s/f/t flow events
    pa.field("flow_bp", pa.string()),
    # Collective arguments (NCCL/RCCL kernels on recent PyTorch, record_param_comms on older ones)
    pa.field("coll_name", pa.string()),
    pa.field("in_nelems", pa.int64()),
    pa.field("out_nelems", pa.int64()),
    pa.field("group_size", pa.int64()),
    pa.field("dtype", pa.string()),
    pa.field("pg_name", pa.string()),
    pa.field("pg_desc", pa.string()),
    pa.field("pg_ranks", pa.string()),  # JSON text, e.g. "[0, 1]"
    pa.field("seq", pa.int64()),
    pa.field("input_dims", pa.string()),  # JSON text of args["Input Dims"]
    pa.field("input_types", pa.string()),  # JSON text of args["Input type"]
    pa.field("args_json", pa.string()),  # the whole `args` object as JSON text: nothing is dropped
]

EVENT_KEY_FIELDS: list[pa.Field] = [
    pa.field("job", pa.string(), nullable=False),
    pa.field("rank", pa.int32(), nullable=False),
    pa.field("trace_sha256", pa.string(), nullable=False),
]

READER_EVENTS = pa.schema(EVENT_FIELDS)
EVENTS = pa.schema(EVENT_KEY_FIELDS + EVENT_FIELDS)
# What an events file holds: EVENTS without trace_sha256. A file is named by that hash
# (events/job=<job>/rank=<rank>/<sha256>.parquet) and the catalog views read it from the name:
# the hash is complete only once the reading that parses the file reaches its end, after the
# rows were written, and hashing first would read every file twice.
EVENT_FILE = pa.schema([f for f in EVENTS if f.name != "trace_sha256"])

# The manifest: one row per file the warehouse has seen, ingested or refused.
TRACES = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32()),  # null when a refused file's rank could not be known
        pa.field("path", pa.string(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # 'ok' | 'refused'
        pa.field("error", pa.string()),
        pa.field("n_events", pa.int64(), nullable=False),
        pa.field("device", pa.string()),  # e.g. 'NVIDIA A100-SXM4-40GB', 'cpu', 'mtia'
        pa.field("world_size", pa.int32()),
        pa.field("schema_version", pa.string()),
        pa.field(
            "trace_format", pa.string()
        ),  # 'kineto', 'kineto-legacy', ... or what it looked like
        pa.field(
            "rank_source", pa.string()
        ),  # 'distributedInfo' | 'file name' | 'single file' | 'given'
        pa.field("first_ts_ns", pa.int64()),
        pa.field("last_ts_ns", pa.int64()),
        pa.field("events_file", pa.string()),  # relative to the warehouse root
        pa.field("ingested_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

# Top-level keys of a trace other than traceEvents (deviceProperties, distributedInfo,
# schemaVersion, baseTimeNanoseconds, ...), one row per key, value as JSON text.
TRACE_META = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("trace_sha256", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("value_json", pa.string(), nullable=False),
    ]
)

TABLES: dict[str, pa.Schema] = {"events": EVENTS, "traces": TRACES, "trace_meta": TRACE_META}

# Operator and collective micro-benchmarks (`lumos opbench import`), one row per measured shape,
# in the canonical columns of lumos.opmodel.features.SHAPE_COLUMNS (null where a file has none).
# Durations are µs as the files give them: fwd_us/bwd_us for operators, dur_us for single-time
# files (optimizer steps, collectives).
OPBENCH_SHAPE_COLUMNS: list[str] = [
    "mp",
    "b",
    "h",
    "l",
    "dim",
    "encoders",
    "num_layers",
    "hidden_size",
    "param_tensors",
    "params",
    "shape",
    "nodes",
    "gpus_per_node",
]
OPBENCH = pa.schema(
    [
        pa.field("device", pa.string(), nullable=False),  # the --device name given on import
        pa.field("gpu", pa.string(), nullable=False),  # the GPU named in the file name
        pa.field("operator", pa.string(), nullable=False),  # e.g. 'linear1', 'allreduce_large'
        pa.field("op_class", pa.string(), nullable=False),  # gemm, attention, ..., collective
        pa.field("precision", pa.string(), nullable=False),
        pa.field("layout", pa.string()),  # collectives: '<nodes>_<GPUs per node>'
        *[pa.field(c, pa.float64()) for c in OPBENCH_SHAPE_COLUMNS],
        pa.field("fwd_us", pa.float64()),
        pa.field("bwd_us", pa.float64()),
        pa.field("dur_us", pa.float64()),
        pa.field("source_file", pa.string(), nullable=False),  # path relative to the imported dir
        pa.field("source_sha256", pa.string(), nullable=False),
        pa.field("line", pa.int64(), nullable=False),  # 1-based line in the source file
        pa.field("imported_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

TABLES["opbench"] = OPBENCH

# Collectives matched across the ranks of a job (lumos.replay.collectives), one row per collective
# kernel (or CPU collective op on CPU-only ranks) per rank. Times are int64 ns: raw on the rank's
# own clock, and aligned to the clock of `clock_ref_rank` (aligned = raw - offset_ns).
COLLECTIVES = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("trace_sha256", pa.string(), nullable=False),
        pa.field("event_idx", pa.int64(), nullable=False),  # the kernel's (or CPU op's) event
        pa.field("kind", pa.string(), nullable=False),  # 'gpu' kernel | 'cpu' op (CPU-only ranks)
        pa.field("kernel_name", pa.string()),
        pa.field("stream", pa.int64()),
        pa.field("group_key", pa.string(), nullable=False),  # 'pg=<name>', 'ranks=[..]', 'default'
        pa.field("group_ranks", pa.string()),  # JSON list of the group's expected global ranks
        pa.field("coll_index", pa.int64()),  # position in the group (the seq when traced)
        pa.field("coll_id", pa.int64()),  # dense id per job of a matched collective, else null
        pa.field("seq", pa.int64()),
        pa.field("coll_name", pa.string()),
        pa.field("args_source", pa.string()),  # kernel | record_param_comms | annotation | ...
        pa.field("in_nelems", pa.int64()),
        pa.field("out_nelems", pa.int64()),
        pa.field("dtype", pa.string()),
        pa.field("elem_bytes", pa.int64()),
        pa.field("in_bytes", pa.int64()),
        pa.field("group_size", pa.int64()),  # declared by the trace, else len(group_ranks)
        pa.field("n_participants", pa.int64()),  # ranks of the group present in the warehouse
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("dur_ns", pa.int64(), nullable=False),
        pa.field("offset_ns", pa.int64(), nullable=False),
        pa.field("clock_ref_rank", pa.int32(), nullable=False),
        pa.field("aligned_start_ns", pa.int64(), nullable=False),
        pa.field("aligned_end_ns", pa.int64(), nullable=False),
        pa.field("last_arrival_ns", pa.int64()),  # aligned; null unless every participant is here
        pa.field("wait_ns", pa.int64()),  # waiting for peers; null when unknown
        pa.field("transfer_ns", pa.int64()),  # dur_ns - wait_ns
        pa.field("end_resid_ns", pa.int64()),  # aligned end minus the participants' median end
        pa.field("status", pa.string(), nullable=False),  # see COLLECTIVE_STATUSES
    ]
)
COLLECTIVE_STATUSES: tuple[str, ...] = ("matched", "partial", "single-rank", "unmatched", "p2p")

TABLES["collectives"] = COLLECTIVES

# Replay results (lumos/replay/run.py): one Parquet file per job under <wh>/<table>/job=<enc>/.
SCHEDULES = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),  # 'model' | 'identity' | 'multirank'
        pa.field("task", pa.int64(), nullable=False),  # tasks.task of that job and rank
        pa.field("start_ns", pa.int64(), nullable=False),  # relative to the rank's origin
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("crit_kind", pa.int8(), nullable=False),  # kernels.replay.Crit
        pa.field("crit_src", pa.int64(), nullable=False),  # task that bound the end, -1 none
    ]
)
TABLES["schedules"] = SCHEDULES

ITERATION_REPLAY = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),  # 'cpu_step' | 'gpu_span' | 'period'
        pa.field("measured_ns", pa.int64(), nullable=False),
        pa.field("replayed_ns", pa.int64(), nullable=False),
        pa.field("rel_error", pa.float64(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),  # 'model' | 'identity'
        pa.field("warmup", pa.bool_(), nullable=False),
        pa.field("truncated", pa.bool_(), nullable=False),
        # the step's measured external waits in this mode's replay (union over streams) and
        # their share of measured_ns (lumos_sql/replay/iteration_replay.sql)
        pa.field("ext_wait_ns", pa.int64()),
        pa.field("ext_wait_share", pa.float64()),
    ]
)
TABLES["iteration_replay"] = ITERATION_REPLAY

# The execution graph of each job and rank (lumos_sql/graph; written beside the replay results). Task times are ns relative to the rank's origin (origin_ns, epoch ns).
TASKS = pa.schema(
    [
        pa.field("job", pa.string()),
        pa.field("rank", pa.int32()),
        pa.field("task", pa.int64()),  # 0..n-1 per rank, by (start, processor, end, sub, event)
        pa.field("proc", pa.int64()),  # CPU threads by (pid, tid), then GPU streams
        pa.field("is_gpu", pa.bool_()),
        pa.field("pid", pa.int64()),  # CPU tasks
        pa.field("tid", pa.int64()),
        pa.field("device", pa.int64()),  # GPU tasks
        pa.field("stream", pa.int64()),
        pa.field("dev", pa.int32()),  # dense device id of a GPU task
        pa.field("event_idx", pa.int64()),  # the event it comes from (an op piece: its op's)
        pa.field("name", pa.string()),
        pa.field("role", pa.string()),  # op, launch, stream_sync, ..., kernel, memcpy, memset
        pa.field("kind", pa.int8()),  # kernels.graph.Kind
        pa.field("ts_ns", pa.int64()),
        pa.field("dur_ns", pa.int64()),  # traced
        pa.field("model_dur_ns", pa.int64()),  # in the model replay (syncs: their call cost)
        pa.field("rt_mode", pa.int8()),  # kernels.graph.Rt
        pa.field("rt_arg", pa.int64()),
        pa.field("launch_src", pa.int64()),  # launching CPU task of a GPU task, -1 none
        pa.field("correlation", pa.int64()),
        pa.field("gap_ns", pa.int64()),  # CPU: idle time before the task no edge explains
        # GPU: the inter-op gap measured in its step on its device (NULL: the device's applies)
        pa.field("step_gap_ns", pa.int64()),
        pa.field("origin_ns", pa.int64()),
        # GPU: the delay before its start that no edge explains, kept in the model replay
        pa.field("ext_wait_ns", pa.int64()),
        # peers_not_traced | unmatched_stream_wait | unknown (lumos_sql/graph/waits.sql)
        pa.field("wait_cause", pa.string()),
    ]
)
TABLES["tasks"] = TASKS

DEPS = pa.schema(
    [
        pa.field("job", pa.string()),
        pa.field("rank", pa.int32()),
        pa.field("src", pa.int64()),
        pa.field("dst", pa.int64()),
        # launch | stream_wait | stream_wait_inferred | sm_wait | thread
        pa.field("kind", pa.string()),
    ]
)
TABLES["deps"] = DEPS

ITERATIONS = pa.schema(
    [
        pa.field("job", pa.string()),
        pa.field("rank", pa.int32()),
        pa.field("step", pa.int64()),
        pa.field("ordinal", pa.int32()),
        pa.field("pid", pa.int64()),  # the ProfilerStep thread
        pa.field("tid", pa.int64()),
        pa.field("cpu_start_ns", pa.int64()),  # epoch ns
        pa.field("cpu_end_ns", pa.int64()),
        pa.field("cpu_step_ns", pa.int64()),
        pa.field("next_start_ns", pa.int64()),  # only when the next traced step is step + 1
        pa.field("period_ns", pa.int64()),
        pa.field("gpu_start_ns", pa.int64()),
        pa.field("gpu_end_ns", pa.int64()),
        pa.field("gpu_span_ns", pa.int64()),
        pa.field("n_gpu_tasks", pa.int64()),
        pa.field("n_missing_gpu", pa.int64()),
        pa.field("warmup", pa.bool_()),
        pa.field("truncated", pa.bool_()),
        # the trace has no ProfilerStep: step 0 is the whole capture (graph/iterations.sql)
        pa.field("whole_capture", pa.bool_()),
    ]
)
TABLES["iterations"] = ITERATIONS

KERNELS = pa.schema(
    [
        pa.field("job", pa.string()),
        pa.field("name", pa.string()),
        pa.field("device", pa.int64()),
        pa.field("stream", pa.int64()),
        pa.field("role", pa.string()),
        pa.field("n", pa.int64()),
        pa.field("n_launched", pa.int64()),
        pa.field("total_dur_ns", pa.int64()),
        pa.field("median_dur_ns", pa.int64()),
        pa.field("mean_dur_ns", pa.float64()),
        pa.field("std_dur_ns", pa.float64()),
        pa.field("min_dur_ns", pa.int64()),
        pa.field("max_dur_ns", pa.int64()),
        pa.field("median_queue_ns", pa.int64()),  # GPU start - launch call end
        pa.field("p90_queue_ns", pa.int64()),
    ]
)
TABLES["kernels"] = KERNELS

REPLAY_QUALITY = pa.schema(
    [
        pa.field("job", pa.string()),
        pa.field("rank", pa.int32()),
        pa.field("mode", pa.string()),
        pa.field("metric", pa.string()),
        pa.field("n_steps", pa.int64()),  # complete steps (neither warm-up nor truncated)
        pa.field("median_rel_error", pa.float64()),
        pa.field("max_rel_error", pa.float64()),
        pa.field("unexplained_slack_ns", pa.int64()),
        pa.field("n_unexplained", pa.int64()),
        # median over the complete steps of iteration_replay.ext_wait_share, and the cause
        # holding most of the rank's external-wait time (lumos_sql/graph/waits.sql)
        pa.field("ext_wait_share", pa.float64()),
        pa.field("wait_cause", pa.string()),
    ]
)
TABLES["replay_quality"] = REPLAY_QUALITY

# One row per replayed job (lumos/replay/fleet.py), written after the job's result tables: what
# the replay read (`inputs_sha256` over the job's ingested files, `code_sha256` over the graph
# SQL and the replay and explanation code), so a nightly `lumos replay` skips jobs whose replay is
# current and replays again those whose traces or whose rules changed.
REPLAY_RUNS = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("inputs_sha256", pa.string(), nullable=False),
        pa.field("code_sha256", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # 'ok' or 'failed'
        pa.field("error", pa.string()),  # why it failed ('failed' rows only)
        pa.field("explained", pa.bool_(), nullable=False),  # explanation tables written too
        pa.field("n_ranks", pa.int32(), nullable=False),  # ingested ranks the replay read
        pa.field("n_tasks", pa.int64()),  # tasks of the job's graph (null when it failed)
        pa.field("seconds", pa.float64(), nullable=False),  # wall time of replay + explanation
        pa.field("replayed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
TABLES["replay_runs"] = REPLAY_RUNS

# Explanations of measured and replayed iterations (lumos/explain/), one Parquet
# file per job under <wh>/<table>/job=<enc>/. `mode` is 'measured' (the trace's own times),
# 'model' or 'identity' (the replay's schedules). Times are ns from the rank's origin.
BREAKDOWN = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("span_start_ns", pa.int64(), nullable=False),  # the step's GPU span
        pa.field("span_end_ns", pa.int64(), nullable=False),
        pa.field("span_ns", pa.int64(), nullable=False),
        pa.field("exposed_compute_ns", pa.int64(), nullable=False),  # compute, no communication
        pa.field("overlapped_ns", pa.int64(), nullable=False),  # compute and communication
        pa.field("exposed_comm_ns", pa.int64(), nullable=False),  # communication, no compute
        pa.field("idle_ns", pa.int64(), nullable=False),  # other/idle: no GPU task busy
        # the part of idle_ns in measured external waits (lumos_sql/graph/waits.sql)
        pa.field("ext_wait_ns", pa.int64()),
        pa.field("n_gpu_tasks", pa.int64(), nullable=False),  # GPU tasks of the step
        pa.field("warmup", pa.bool_(), nullable=False),
        pa.field("truncated", pa.bool_(), nullable=False),
    ]
)
TABLES["breakdown"] = BREAKDOWN

SM_UTILIZATION = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("bin", pa.int32(), nullable=False),  # 1 ms bins from the step's GPU span start
        pa.field("bin_start_ns", pa.int64(), nullable=False),
        pa.field("bin_ns", pa.int64(), nullable=False),  # 1 ms, the last bin of a step shorter
        pa.field("busy_ns", pa.int64(), nullable=False),  # time with at least one busy stream
        pa.field("busy_share", pa.float64(), nullable=False),  # busy_ns / bin_ns
    ]
)
TABLES["sm_utilization"] = SM_UTILIZATION

# One row per node of the critical path of a replayed step, last node first (pos 0). The node
# covers [lo_ns, hi_ns]: its execution after its start (exec_ns, category exec_cat) and the gap
# before it (gap_ns, gap_cat); see lumos/explain/critical_path.py for the categories.
CRITICAL_PATH = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),  # 'model' | 'identity'
        pa.field("pos", pa.int64(), nullable=False),
        pa.field("task", pa.int64(), nullable=False),
        pa.field("src", pa.int64(), nullable=False),  # crit_src: the task that bound it, -1 none
        pa.field("crit_kind", pa.int8(), nullable=False),  # kernels.replay.Crit
        pa.field("lo_ns", pa.int64(), nullable=False),
        pa.field("hi_ns", pa.int64(), nullable=False),
        pa.field("exec_ns", pa.int64(), nullable=False),
        pa.field("exec_cat", pa.string(), nullable=False),
        pa.field("gap_ns", pa.int64(), nullable=False),
        pa.field("gap_cat", pa.string(), nullable=False),
    ]
)
TABLES["critical_path"] = CRITICAL_PATH

# Per replayed step and category, the time of the step's window (first start to last end of its
# tasks) that the critical path spent there; shares of one step and mode sum to 1.
CRITICAL_PATH_SUMMARY = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("step", pa.int64(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("category", pa.string(), nullable=False),  # cpu, gpu_compute, communication, ...
        pa.field("ns", pa.int64(), nullable=False),
        pa.field("share", pa.float64(), nullable=False),
        pa.field("window_start_ns", pa.int64(), nullable=False),
        pa.field("window_end_ns", pa.int64(), nullable=False),
        pa.field("n_nodes", pa.int64(), nullable=False),  # nodes of the step's critical path
        pa.field("warmup", pa.bool_(), nullable=False),
        pa.field("truncated", pa.bool_(), nullable=False),
    ]
)
TABLES["critical_path_summary"] = CRITICAL_PATH_SUMMARY

# One row per estimated configuration (lumos estimate --save / lumos sweep): a column per
# configuration key (lumos.estimate.config.ModelConfig), the prediction and its interval, memory.
ESTIMATE_CONFIG_FIELDS = [
    pa.field("layers", pa.int64(), nullable=False),
    pa.field("hidden", pa.int64(), nullable=False),
    pa.field("ffn", pa.int64(), nullable=False),
    pa.field("heads", pa.int64(), nullable=False),
    pa.field("kv_heads", pa.int64()),  # key/value heads (null in rows written before it existed)
    pa.field("seq", pa.int64(), nullable=False),
    pa.field("micro_batch", pa.int64(), nullable=False),
    pa.field("num_micro_batches", pa.int64(), nullable=False),
    pa.field("vocab", pa.int64(), nullable=False),
    pa.field("dp", pa.int64(), nullable=False),
    pa.field("pp", pa.int64(), nullable=False),
    pa.field("tp", pa.int64(), nullable=False),
    pa.field("pp_schedule", pa.string(), nullable=False),
    pa.field("dtype_bytes", pa.int64(), nullable=False),
    pa.field("recompute", pa.string(), nullable=False),
    pa.field("zero_stage", pa.int64(), nullable=False),
    pa.field("sequence_parallel", pa.bool_(), nullable=False),
    pa.field("gated_mlp", pa.bool_(), nullable=False),
    pa.field("flash_attention", pa.bool_(), nullable=False),
    # null in rows written before the key existed (read as the default, false)
    pa.field("vocab_parallel", pa.bool_()),
    pa.field("device_memory", pa.int64(), nullable=False),
]
ESTIMATES = pa.schema(
    [
        pa.field("sweep_id", pa.string(), nullable=False),
        pa.field("job", pa.string(), nullable=False),  # the base job predicted from
        *ESTIMATE_CONFIG_FIELDS,
        pa.field("speedups", pa.string(), nullable=False),  # JSON {class: factor}, '{}' for none
        # CPU cores the ranks were taken to time-share (--host-cores, a grid's host_cores, or the
        # base's recorder); null: unknown, none modelled (and in estimates saved before it)
        pa.field("host_cores", pa.int32()),
        pa.field("predicted_ns", pa.int64(), nullable=False),
        # the step as its trace would record it (the profiler's cost kept) where predicted_ns is
        # the step without the profiler (a single-GPU base); null: predicted_ns is that already
        pa.field("traced_ns", pa.int64()),
        pa.field("interval_low_ns", pa.int64(), nullable=False),
        pa.field("interval_high_ns", pa.int64(), nullable=False),
        pa.field("memory_bytes", pa.int64(), nullable=False),
        pa.field("fits", pa.bool_()),  # null when the device memory is unknown
        # global tokens per step (micro_batch x num_micro_batches x dp x seq) / step seconds;
        # model FLOPs utilisation against the device's dense bf16 peak (lumos.estimate.throughput:
        # null for fp32/fp8 configurations and unknown devices); both null in rows saved before
        pa.field("tokens_per_s", pa.float64()),
        pa.field("mfu", pa.float64()),
        pa.field("warnings", pa.string(), nullable=False),  # JSON list
        pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
TABLES["estimates"] = ESTIMATES

# The configuration of every job, as inferred from its trace (lumos.estimate.infer_base), so that
# estimates can be paired with real runs (view estimate_vs_measured).
JOB_CONFIGS = pa.schema(
    [
        pa.field("job", pa.string(), nullable=False),
        *ESTIMATE_CONFIG_FIELDS,
        pa.field("inferred_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
TABLES["job_configs"] = JOB_CONFIGS

# The result files of an S3 warehouse (warehouse/lake_results.py): a Delta table `<uri>/results`
# with one row per file a replay, an explanation or an estimate wrote. `relative` is the path a
# local warehouse gives the file (`tasks/job=<enc>/part.parquet`), `key` the content-addressed
# object holding it; the latest row of a `relative` is its content, as a local file is
# overwritten in place. Not a catalog view: the views read the files the rows name.
RESULT_FILES = pa.schema(
    [
        pa.field("relative", pa.string(), nullable=False),
        pa.field("table_name", pa.string(), nullable=False),
        pa.field("job", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("sha256", pa.string(), nullable=False),
        pa.field("size_bytes", pa.int64(), nullable=False),
        pa.field("committed_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
