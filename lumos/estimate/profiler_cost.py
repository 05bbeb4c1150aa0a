"""The profiler's cost in a traced step, and the step without it.

Kineto records every CPU operator and every runtime and driver call; each record costs the
traced process a few microseconds of CPU time (the callbacks at its start and end) that the
untraced run does not pay. Inside a CPU task of the graph, that cost is paid once per event
recorded within the task's span (the task's own and its nested ops' and calls'), so the task's
unprofiled duration is its traced one less ``PROFILER_EVENT_NS`` per event, never below zero.

``PROFILER_EVENT_NS`` is learned from runs traced *and* timed without the profiler (the GPU
corpus's `measured.json`; docs/estimate-gpu.md has the per-run fit): the cost per event that
makes each run's replayed step, with the cost taken out, equal its unprofiled step; the middle
of the runs' best values. It belongs to a host and a torch version. A trace of CPU activity alone
(no CUDA runtime calls, no CUPTI) costs far less per event: ``CPU_EVENT_NS``, learned from the
CPU ground-truth corpus's traced and unprofiled steps.
"""

from __future__ import annotations

import numpy as np

__all__ = ["CPU_EVENT_NS", "PROFILER_EVENT_NS", "unprofiled_cpu_ns"]

# learned on the GPU corpus (docs/estimate-gpu.md)
PROFILER_EVENT_NS = 3_500.0
# with CPU activity alone: (traced - unprofiled median step) / recorded events per step, the
# median over the CPU corpus's single-rank runs (docs/estimate-gpu.md, "CPU activity alone")
CPU_EVENT_NS = 650.0


def unprofiled_cpu_ns(dur_ns: np.ndarray, n_events: np.ndarray, event_ns: float) -> np.ndarray:
    """CPU task durations without the profiler's per-event cost (floats, >= 0)."""
    return np.maximum(np.asarray(dur_ns, np.float64) - event_ns * n_events, 0.0)
