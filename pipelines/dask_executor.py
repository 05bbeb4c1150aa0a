"""Dagster's Dask executor (dagster-dask) on an existing cluster, fixed for today's dask.

dagster-dask 0.29.27's executor fails with dask >= 2024.12: `Client.submit` walks every tuple
argument, and the `DagsterRun` it passes is a NamedTuple whose records forbid iteration. Here
the same worker function (`query_on_dask_worker`) is submitted with its arguments bound in a
`functools.partial`, which dask does not walk, under a key that holds the run id (dagster-dask's
`<job>.<step>` is the same for every run, and the scheduler reuses the task it holds under a
key). Everything else is dagster-dask's. Imported only when a scheduler is configured.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import dagster as dg
import dask.distributed
from dagster._core.errors import raise_execution_interrupts
from dagster._utils import iterate_with_context
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
        futures: dict[str, Any] = {}
        with dask.distributed.Client(self.address) as client:
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    # the step's task waits for its inputs' tasks: dask orders them
                    deps = [futures[k] for i in step.step_inputs for k in i.dependency_keys]
                    task = partial(
                        query_on_dask_worker,
                        recon_job=plan_context.reconstructable_job,
                        dagster_run=plan_context.dagster_run,
                        run_config=plan_context.run_config,
                        step_keys=[step.key],
                        instance_ref=plan_context.instance.get_ref(),
                        known_state=execution_plan.known_state,
                    )
                    futures[step.key] = client.submit(
                        _run_step,
                        task,
                        deps,
                        key=f"{plan_context.job_name}.{step.key}.{plan_context.run_id}",
                        resources=get_dask_resource_requirements(step.tags),
                    )
            done = dask.distributed.as_completed(list(futures.values()), with_results=True)
            for _, box in iterate_with_context(raise_execution_interrupts, done):
                yield from box.events


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


def _run_step(task: partial, dependencies: list[Any]) -> _StepEvents:
    """On a worker: run the step (`dependencies` only order the tasks)."""
    return _StepEvents(list(task(dependencies)))
