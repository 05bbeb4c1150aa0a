"""The accuracy bounds the model replay holds itself to, and the words for a wait's cause.

Median ≤ 1 %, max ≤ 3 % of the measured metric over complete steps (docs/replay.md). `lumos
replay`, `lumos status` and the Dagster replay check mark a job outside them; the causes are those
of `lumos_sql/graph/waits.sql`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the cause of a collective kernel's wait in a job that lacks ranks of its world (graph/waits.sql)
PEERS_NOT_TRACED = "peers_not_traced"
MEDIAN_BOUND = 0.01
MAX_BOUND = 0.03

CAUSES = {
    PEERS_NOT_TRACED: "collective kernels held by peers that are not in the warehouse",
    "unmatched_stream_wait": "stream waits whose event record the trace does not place",
    "unknown": "holds nothing in the trace explains: a device-wide stall, a host callback or "
    "another process",
}


def off_bounds(row: Mapping[str, Any]) -> bool:
    """Whether a `replay_quality` row's error is outside the bounds."""
    return (row["median_rel_error"] or 0) > MEDIAN_BOUND or (row["max_rel_error"] or 0) > MAX_BOUND


def cause_words(cause: str | None) -> str:
    """What a `wait_cause` code means, for a message."""
    return CAUSES.get(cause or "", cause or "none")
