"""The keys the reader keeps from every event: the event fields, then the `args` keys promoted to
columns. The order is the row of each key in the span arrays that `fused.scan` fills; a key
written twice keeps its last value, as the `json` module does.
"""

from __future__ import annotations

# Event fields, then the args keys that become columns. Order = row in the span arrays.
EVENT_KEYS = ["ph", "name", "cat", "pid", "tid", "ts", "dur", "id", "bp", "args"]
ARGS_KEYS = [
    "device",
    "stream",
    "correlation",
    "External id",
    "external id",  # legacy 2021 traces
    "Collective name",
    "In msg nelems",
    "Out msg nelems",
    "Group size",
    "dtype",
    "Process Group Name",
    "Process Group Description",
    "Process Group Ranks",
    "Seq",
    "seq",
    "Input Dims",
    "Input type",
]
KEYS = EVENT_KEYS + ARGS_KEYS
FIELD = {k: i for i, k in enumerate(KEYS)}
N_EVENT_KEYS = len(EVENT_KEYS)
ARGS = FIELD["args"]
