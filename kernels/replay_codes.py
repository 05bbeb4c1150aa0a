"""Codes shared by the replay kernels and their callers: what bound a task, an instance's status.

The rt_mode codes mirror `kernels.graph.Rt` as plain ints for use inside numba. Kept apart so that
the event-driven simulation (`kernels.replay_event`), the linear pass (`kernels.replay_linear`)
and the batch driver (`kernels.replay_batch`) import them without a cycle.
"""

from __future__ import annotations

from enum import IntEnum

DEFAULT_QUEUE_DEPTH = 1024

# rt_mode codes, mirrored from kernels.graph.Rt for use inside numba
_RT_STREAM = 1
_RT_DEVICE = 2
_RT_EVENT = 3
_RT_RECORD = 4


class Crit(IntEnum):
    """What bound a task's end (`Schedule.crit_kind`)."""

    NONE = 0  # started at its own delay after time 0
    PROC = 1  # the previous task on its processor
    EDGE = 2  # a fixed predecessor (+ edge latency)
    RUNTIME = 3  # the runtime target of a sync / event wait
    QUEUE = 4  # back-pressure: the GPU start that freed a slot in the full launch queue
    COLLECTIVE = 5  # the last participant of its collective to arrive


C_NONE, C_PROC, C_EDGE, C_RUNTIME, C_QUEUE, C_COLL = 0, 1, 2, 3, 4, 5


STATUS_OK = 0
STATUS_DEADLOCK = 1


class ReplayError(RuntimeError):
    """A replay could not finish (cycle or unmatched collective); names graph and instance."""
