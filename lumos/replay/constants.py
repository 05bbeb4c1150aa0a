"""Per-rank, per-device replay constants, estimated from the trace by fixed rules.

The evidence comes from `lumos_sql/graph/constants.sql` (medians over the whole trace, never
fitted to a step's length). Rules, the same for every trace:

* ``gap_ns`` (GPU inter-op gap): median of ``start - previous end`` on a stream whose next task had
  already been launched (queued work). Fewer than 10 samples: 2 us (CUDA's typical 1-3 us).
* ``launch_lat_ns``: median of ``GPU start - launch call end`` for tasks launched on an idle
  stream, minus the gap (the replay adds the gap after every GPU task's ready time); >= 0.
  Fewer than 5 samples: 3 us.
* ``sync_lat_ns`` (return latency of a synchronising call after its GPU work ends): median of
  ``call end - target end`` over syncs and blocking copies that waited. No sample: 5 us.
* ``launch_call_ns``: median launch-call duration (the issue part of a blocking copy).
* ``queue_depth``: CUDA's launch queue holds 1024 entries; a trace that shows more launched-but-not-
  started tasks than that raises it to what it shows. The kernel counts launched-but-not-started
  tasks per device, so GPU tasks that start out of launch order (an NCCL kernel waiting on its
  stream while other streams run past it) need no exception.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

DEFAULT_GAP_NS = 2_000
DEFAULT_LAUNCH_LAT_NS = 3_000
DEFAULT_SYNC_LAT_NS = 5_000
DEFAULT_LAUNCH_CALL_NS = 5_000
CUDA_QUEUE_DEPTH = 1024
MIN_GAP_SAMPLES = 10
MIN_LAUNCH_SAMPLES = 5

CONST_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int64()),
        pa.field("launch_lat_ns", pa.int64()),
        pa.field("gap_ns", pa.int64()),
        pa.field("sync_lat_ns", pa.int64()),
        pa.field("launch_call_ns", pa.int64()),
        pa.field("queue_depth", pa.int64()),
    ]
)


@dataclass(frozen=True)
class DeviceConstants:
    rank: int
    device: int
    launch_lat_ns: int
    gap_ns: int
    sync_lat_ns: int
    launch_call_ns: int
    queue_depth: int


def _num(v: object) -> float | None:
    return None if v is None else float(v)


def estimate(raw: list[dict]) -> list[DeviceConstants]:
    """Apply the module's rules to the rows of `g_const_raw`."""
    out = []
    for r in raw:
        gap = _num(r["gap_med"]) if r["gap_n"] >= MIN_GAP_SAMPLES else None
        gap_ns = int(round(max(gap, 0.0))) if gap is not None else DEFAULT_GAP_NS
        idle = _num(r["idle_launch_med"]) if r["idle_launch_n"] >= MIN_LAUNCH_SAMPLES else None
        lat = int(round(max(idle - gap_ns, 0.0))) if idle is not None else DEFAULT_LAUNCH_LAT_NS
        sync = _num(r["sync_med"]) if r["sync_n"] >= 1 else None
        sync_ns = int(round(max(sync, 0.0))) if sync is not None else DEFAULT_SYNC_LAT_NS
        call = _num(r["launch_call_med"]) if r["launch_call_n"] >= 1 else None
        call_ns = int(round(call)) if call is not None else DEFAULT_LAUNCH_CALL_NS
        q = max(CUDA_QUEUE_DEPTH, int(r["max_queued"] or 0) + 1)
        out.append(
            DeviceConstants(int(r["rank"]), int(r["device"]), lat, gap_ns, sync_ns, call_ns, q)
        )
    return out


def to_arrow(consts: list[DeviceConstants]) -> pa.Table:
    cols = {f.name: [getattr(c, f.name) for c in consts] for f in CONST_SCHEMA}
    return pa.table(cols, schema=CONST_SCHEMA)
