"""Dagster's Dask executor (dagster-dask) on an existing cluster, fixed for today's dask and for
dynamic outputs.

dagster-dask 0.29.27's executor submits the whole plan up front, so it cannot run steps mapped
over a dynamic output (the sweep's chunks), and it fails with dask >= 2024.12: `Client.submit`
walks every tuple argument, and its `DagsterRun` is a record that forbids iteration. Here
Dagster's own `ActiveExecution` decides which steps are ready (as the multiprocess executor
does), each is submitted with its arguments bound in a `functools.partial` (not walked) under a
key that holds the run id (dagster-dask's `<job>.<step>` is the same for every run, and the
scheduler reuses a task it holds under a key). The worker function is dagster-dask's.
Imported only when a scheduler is configured.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import dagster as dg
import dask.distributed
from dagster._core.errors import raise_execution_interrupts
from dagster._core.execution.plan.active import ActiveExecution
from dagster_dask.executor import DaskExecutor, get_dask_resource_requirements, query_on_dask_worker


class DaskStepExecutor(DaskExecutor):
    """Each step of a run as a task on the Dask scheduler at `address`."""

    def __init__(self, address: str) -> None:
        super().__init__("existing", {"address": address})
        self.address = address

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
        if not plan_context.instance.is_persistent:
            raise dg.DagsterInvariantViolationError(
                "the Dask executor needs a persistent DagsterInstance (set DAGSTER_HOME)"
            )
        step_of: dict[str, str] = {}  # dask key -> step key
        with (
            dask.distributed.Client(self.address) as client,
            ActiveExecution(execution_plan, retry_mode=self.retries) as active,
        ):
            done = dask.distributed.as_completed(with_results=True)
            while True:
                # steps whose inputs are ready, mapped steps included once their chunks are known
                # (this also resolves them: `is_complete` does not, so it is asked only after)
                for step in active.get_steps_to_execute():
                    key = f"{plan_context.job_name}.{step.key}.{plan_context.run_id}"
                    step_of[key] = step.key
                    task = partial(
                        query_on_dask_worker,
                        recon_job=plan_context.reconstructable_job,
                        dagster_run=plan_context.dagster_run,
                        run_config=plan_context.run_config,
                        step_keys=[step.key],
                        instance_ref=plan_context.instance.get_ref(),
                        known_state=active.get_known_state(),
                    )
                    done.add(
                        client.submit(
                            _run_step,
                            task,
                            key=key,
                            resources=get_dask_resource_requirements(step.tags),
                        )
                    )
                yield from active.plan_events_iterator(plan_context)  # skipped, abandoned
                if active.is_complete:
                    break
                if done.is_empty():
                    raise dg.DagsterInvariantViolationError(
                        "Dask executor: steps are left but none is ready or running"
                    )
                with raise_execution_interrupts():
                    future, box = next(done)
                for event in box.events:
                    yield event
                    active.handle_event(event)
                active.verify_complete(plan_context, step_of[future.key])


@dg.executor(
    name="dask_step_executor",
    config_schema={"address": dg.Field(str, description="The Dask scheduler, tcp://host:port.")},
    requirements=dg.multiple_process_executor_requirements(),
)
def dask_step_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Each step of a run as a task on the Dask scheduler at `address` (an existing cluster)."""
    return DaskStepExecutor(init_context.executor_config["address"])


class _StepEvents:
    """A step's events in a box dask does not look into: it sizes a list item by item, which
    Dagster's records refuse (a warning per result)."""

    def __init__(self, events: list[dg.DagsterEvent]) -> None:
        self.events = events


def _run_step(task: partial) -> _StepEvents:
    """On a worker: run the step (its inputs are ready: the executor submits it only then)."""
    return _StepEvents(list(task([])))
