"""A base step's measured external waits (lumos_sql/graph/waits.sql) in an estimate's step.

A copied task keeps its wait as measured (it is a delay after the task is ready, built into the
replay graph), except a collective kernel's wait for peers that are not traced
(`peers_not_traced`): the peers run the same program, so how long the slowest keeps the traced
rank waiting grows as the compute before that collective does. That wait is scaled by the ratio
of the estimated to the base GPU compute time (kernels, copies and memsets; collectives are not
compute) before it in the step, on its pipeline stage. At the base configuration the ratio is 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kernels.graph import Kind
from lumos.replay.bounds import PEERS_NOT_TRACED

__all__ = ["ScaledWaits", "has_peer_waits", "scaled_waits"]

_COMPUTE = (int(Kind.GPU_KERNEL), int(Kind.GPU_MEMCPY), int(Kind.GPU_MEMSET))


def _waits(tasks) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN001
    """Each task's measured wait and whether it is a collective's wait for untraced peers."""
    names = tasks.column_names
    n = tasks.num_rows
    if "ext_wait_ns" not in names or "wait_cause" not in names:
        return np.zeros(n, np.int64), np.zeros(n, bool)
    wait = np.maximum(np.asarray(tasks.column("ext_wait_ns").fill_null(0).to_numpy(), np.int64), 0)
    cause = np.asarray(tasks.column("wait_cause").to_pylist(), object)
    kind = np.asarray(tasks.column("kind").to_numpy(), np.int64)
    return wait, (cause == PEERS_NOT_TRACED) & (kind == int(Kind.COLLECTIVE)) & (wait > 0)


def has_peer_waits(tasks) -> bool:  # noqa: ANN001
    """Whether a step's tasks hold a collective's wait for peers that are not traced."""
    return bool(_waits(tasks)[1].any())


def _compute_before(dur: np.ndarray, compute: np.ndarray, stage: np.ndarray) -> np.ndarray:
    """Per row of `dur` (configs x tasks): the compute time before each task (in task order)
    on its stage."""
    d = np.where(compute, dur, 0).astype(np.float64)
    out = np.empty_like(d)
    for s in np.unique(stage):
        idx = np.flatnonzero(stage == s)
        c = np.cumsum(d[:, idx], axis=1)
        out[:, idx] = c - d[:, idx]
    return out


@dataclass
class ScaledWaits:
    """The waits of an edited step that scale with compute: edited task ids (`task`), their
    measured wait and the base's compute time before them (0: none, kept as measured)."""

    task: np.ndarray
    wait_ns: np.ndarray
    base_before_ns: np.ndarray
    compute: np.ndarray  # per edited task: counted as compute
    stage: np.ndarray  # per edited task

    def delays(self, delay_ns: np.ndarray, dur_ns: np.ndarray) -> np.ndarray:
        """The replay delays (configs x tasks) for durations `dur_ns` (configs x tasks): the
        graph's `delay_ns`, where each scaled wait is its measured wait times the ratio of the
        compute before it under those durations to the base's."""
        dur = np.atleast_2d(dur_ns)
        before = _compute_before(dur, self.compute, self.stage)[:, self.task]
        base = self.base_before_ns
        ratio = np.where(base > 0, before / np.where(base > 0, base, 1.0), 1.0)
        out = np.repeat(np.asarray(delay_ns, np.int64)[None, :], dur.shape[0], axis=0)
        out[:, self.task] += np.rint(self.wait_ns * (ratio - 1.0)).astype(np.int64)
        return out


def scaled_waits(
    tasks,  # noqa: ANN001
    base_of: np.ndarray,
    stage: np.ndarray | None,
    base_tasks,  # noqa: ANN001
    base_base_of: np.ndarray,
    base_dur_ns: np.ndarray,
) -> ScaledWaits | None:
    """The scaled waits of an edited step (`tasks`, each copying base task `base_of`, on pipeline
    `stage`), against the base configuration's edited step (`base_tasks`, `base_base_of`, its
    durations `base_dur_ns`); None when it has none, so that the graph's delays stand as built."""
    wait, scaled = _waits(tasks)
    if not scaled.any():
        return None
    n = tasks.num_rows
    st = np.zeros(n, np.int64) if stage is None else np.asarray(stage, np.int64)
    compute = np.isin(np.asarray(tasks.column("kind").to_numpy(), np.int64), _COMPUTE)
    b_compute = np.isin(np.asarray(base_tasks.column("kind").to_numpy(), np.int64), _COMPUTE)
    b_before = _compute_before(
        np.asarray(base_dur_ns)[None, :], b_compute, np.zeros(base_tasks.num_rows, np.int64)
    )[0]
    # per base task: the compute before it in the base configuration (-1: not in that step)
    of_base = np.full(int(max(base_of.max(), base_base_of.max())) + 1, -1.0)
    of_base[base_base_of] = b_before
    task = np.flatnonzero(scaled)
    before = of_base[base_of[task]]
    return ScaledWaits(
        task=task,
        wait_ns=wait[task].astype(np.float64),
        base_before_ns=np.where(before > 0, before, 0.0),
        compute=compute,
        stage=st,
    )
