"""The one Arrow schema registry. Every table the warehouse writes is declared here and only here.

Times are int64 nanoseconds, parsed exactly from the JSON text (float64 drops ns digits at epoch
scale, field-notes §3). `job` and `rank` are stored inside every file as well as in the directory
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
        pa.field("trace_format", pa.string()),  # 'kineto', 'kineto-legacy', ... or what it looked like
        pa.field("rank_source", pa.string()),  # 'distributedInfo' | 'file name' | 'single file' | 'given'
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
