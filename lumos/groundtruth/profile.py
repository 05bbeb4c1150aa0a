"""Run and time the steps of one rank: warm-up, unprofiled steps, then `repeat` fresh profiler
cycles of one traced step each (one long active window distorts later steps: docs/groundtruth.md, "Output").

The step timer brackets exactly what the `ProfilerStep#<n>` annotation brackets: the profiler
opens that annotation at the end of `prof.step()` (or of entering the profiler) and closes it at
the start of the next `prof.step()`, so the timer starts right after one and stops right before
the next. The two then differ only by the cost of entering and leaving one annotation.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch.profiler import ProfilerAction, ProfilerActivity, profile, schedule

from lumos.groundtruth.config import RunControl

# One cycle = one untraced step, one warm-up step (profiler on, events dropped), one traced step.
CYCLE = {"wait": 1, "warmup": 1, "active": 1}


@dataclass
class StepRecord:
    index: int  # the training step's index (data seed)
    phase: str  # warmup | unprofiled | wait | profiler_warmup | traced
    wall_ns: int
    loss: float
    profiler_step: int | None = None  # n of ProfilerStep#n, inside the profiler
    cycle: int | None = None  # traced steps: which profiler cycle (and trace file)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class RankRun:
    steps: list[StepRecord] = field(default_factory=list)
    traces: list[str] = field(default_factory=list)


def run_rank(
    step: Callable[[int], float],
    control: RunControl,
    trace_path: Callable[[int], Path],
    metadata: Callable[[int], dict[str, Any]] | None = None,
) -> RankRun:
    """Train and measure one rank; `trace_path(cycle)` names the Kineto file of each cycle and
    `metadata(cycle)` the top-level keys added to its header (`job_name`, ...)."""
    run = RankRun()
    clock = time.perf_counter_ns
    index = 0
    for phase, count in (("warmup", control.warmup), ("unprofiled", control.steps)):
        for _ in range(count):
            t0 = clock()
            loss = step(index)
            run.steps.append(StepRecord(index, phase, clock() - t0, loss))
            index += 1

    cycle_of_trace = [0]

    def on_trace_ready(prof: profile) -> None:
        path = trace_path(cycle_of_trace[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(path))
        run.traces.append(str(path))
        cycle_of_trace[0] += 1

    sched = schedule(**CYCLE, repeat=control.repeat)
    names = {
        ProfilerAction.NONE: "wait",
        ProfilerAction.WARMUP: "profiler_warmup",
        ProfilerAction.RECORD: "traced",
        ProfilerAction.RECORD_AND_SAVE: "traced",
    }
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=on_trace_ready,
        record_shapes=True,
    ) as prof:
        for n in range(control.repeat * sum(CYCLE.values())):
            t0 = clock()
            loss = step(index)
            t1 = clock()
            phase = names[sched(n)]
            if phase == "traced" and metadata is not None:
                # After the timer stops: it lands in the step's idle tail, never inside its ops.
                for key, value in metadata(n // sum(CYCLE.values())).items():
                    prof.add_metadata_json(key, json.dumps(value))
            cycle = n // sum(CYCLE.values()) if phase == "traced" else None
            run.steps.append(StepRecord(index, phase, t1 - t0, loss, n, cycle))
            index += 1
            prof.step()
    return run
