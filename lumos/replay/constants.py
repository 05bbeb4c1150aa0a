"""Per-rank, per-device replay constants, estimated from the trace by fixed rules.

The evidence comes from `lumos_sql/graph/constants.sql` (medians over the whole trace, never
fitted to a step's length): ``gap_ns`` (GPU inter-op gap on a busy stream; `step_gaps` the same
per profiler step, which the model replay of that step uses), ``launch_lat_ns``
(launch call end to GPU start on an idle stream, less the gap), ``sync_lat_ns`` (a synchronising
call's return after its GPU work), ``launch_call_ns`` and ``queue_depth`` (CUDA's 1024, or more
when the trace shows more). Each has a default when the trace holds too few samples; the rules in
full: docs/replay.md, "Module notes".
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


STEP_GAP_SCHEMA = pa.schema(
    [
        pa.field("rank", pa.int32()),
        pa.field("device", pa.int64()),
        pa.field("step", pa.int64()),
        pa.field("gap_ns", pa.int64()),
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


def _gap(row: dict) -> int | None:
    """The gap of a `g_const_raw` or `g_step_gap_raw` row; None below MIN_GAP_SAMPLES samples."""
    gap = _num(row["gap_med"]) if row["gap_n"] >= MIN_GAP_SAMPLES else None
    return int(round(max(gap, 0.0))) if gap is not None else None


def estimate(raw: list[dict]) -> list[DeviceConstants]:
    """Apply the module's rules to the rows of `g_const_raw`."""
    out = []
    for r in raw:
        gap = _gap(r)
        gap_ns = gap if gap is not None else DEFAULT_GAP_NS
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


def step_gaps(raw: list[dict]) -> pa.Table:
    """The gap of each (rank, device, step) of `g_step_gap_raw` with MIN_GAP_SAMPLES samples of
    its own (`g_step_gap`); any other step's GPU tasks take their device's ``gap_ns``."""
    rows = [(r, _gap(r)) for r in raw]
    rows = [(int(r["rank"]), int(r["device"]), int(r["step"]), g) for r, g in rows if g is not None]
    cols = list(zip(*rows, strict=True)) if rows else [(), (), (), ()]
    return pa.table(dict(zip(STEP_GAP_SCHEMA.names, map(list, cols), strict=True)), STEP_GAP_SCHEMA)
