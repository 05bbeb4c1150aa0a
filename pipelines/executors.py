"""Which executor runs `ingest_job`'s steps: in process (the default), or a Dask cluster.

`LUMOS_DASK_SCHEDULER=tcp://host:8786` when the definitions are loaded selects Dagster's Dask
executor (`dagster-dask`, the `cluster` extra) pointed at that scheduler: each step (ingest,
replay, catalog) of each run is a task on a worker, so the runs of a backfill spread over the
workers. Unset, steps run in the run's own process, as before. docs/dagster.md: the deployment.

dagster-dask 0.29.27's executor fails with dask >= 2024.12: `Client.submit` walks every tuple
argument, and the `DagsterRun` it passes is a NamedTuple whose records forbid iteration.
`DaskStepExecutor` submits the same worker function with its arguments bound in a
`functools.partial`, which dask does not walk; everything else is dagster-dask's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import partial
from typing import Any

import dagster as dg

DASK_SCHEDULER_ENV = "LUMOS_DASK_SCHEDULER"


def dask_scheduler() -> str | None:
    """The scheduler address from `LUMOS_DASK_SCHEDULER`, or None (unset or blank)."""
    return os.environ.get(DASK_SCHEDULER_ENV, "").strip() or None


def job_executor(address: str | None = None) -> dg.ExecutorDefinition:
    """The Dask executor pointed at `address` (default: `LUMOS_DASK_SCHEDULER`), else the
    in-process executor. Raises ImportError, naming the extra, if dagster-dask is missing."""
    address = address or dask_scheduler()
    if not address:
        return dg.in_process_executor
    if "://" not in address:
        raise ValueError(
            f"{DASK_SCHEDULER_ENV}={address!r}: expected a scheduler address such as "
            "tcp://host:8786"
        )
    try:
        import dagster_dask  # noqa: F401
    except ImportError as exc:
        raise ImportError(
            f"{DASK_SCHEDULER_ENV}={address} needs dagster-dask: pip install -e '.[cluster]'"
        ) from exc
    return dask_step_executor.configured({"address": address}, name="dask_executor")


@dg.executor(
    name="dask_step_executor",
    config_schema={"address": dg.Field(str, description="The Dask scheduler, tcp://host:port.")},
    requirements=dg.multiple_process_executor_requirements(),
)
def dask_step_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Each step of a run as a task on the Dask scheduler at `address` (an existing cluster)."""
    return _dask_executor_class()(init_context.executor_config["address"])


def _dask_executor_class() -> type:
    """`DaskStepExecutor`, defined on first use so that loading the definitions does not import
    dask unless a scheduler is configured."""
    global _DASK_STEP_EXECUTOR
    if _DASK_STEP_EXECUTOR is not None:
        return _DASK_STEP_EXECUTOR
    import dask.distributed
    from dagster._core.errors import raise_execution_interrupts
    from dagster._utils import iterate_with_context
    from dagster_dask.executor import (
        DaskExecutor,
        get_dask_resource_requirements,
        query_on_dask_worker,
    )

    class DaskStepExecutor(DaskExecutor):
        """dagster-dask's executor on an existing cluster, its task arguments kept opaque."""

        def __init__(self, address: str) -> None:
            super().__init__("existing", {"address": address})
            self.address = address

        def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
            if not plan_context.instance.is_persistent:
                raise dg.DagsterInvariantViolationError(
                    "the Dask executor needs a persistent DagsterInstance (set DAGSTER_HOME)"
                )
            job_name = plan_context.job_name
            futures: dict[str, Any] = {}
            with dask.distributed.Client(self.address) as client:
                for level in execution_plan.get_steps_to_execute_by_level():
                    for step in level:
                        # the step waits for its inputs' steps: dask orders the tasks
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
                            key=f"{job_name}.{step.key}.{plan_context.run_id}",
                            resources=get_dask_resource_requirements(step.tags),
                        )
                done = dask.distributed.as_completed(list(futures.values()), with_results=True)
                for _, box in iterate_with_context(raise_execution_interrupts, done):
                    yield from box.events

    _DASK_STEP_EXECUTOR = DaskStepExecutor
    return DaskStepExecutor


_DASK_STEP_EXECUTOR: type | None = None


class _StepEvents:
    """A step's events in a box dask does not look into: it sizes a list item by item, which
    Dagster's records refuse (a warning per result)."""

    def __init__(self, events: list[dg.DagsterEvent]) -> None:
        self.events = events


def _run_step(task: partial, dependencies: list[Any]) -> _StepEvents:
    """On a worker: run the step (`dependencies` only order the tasks)."""
    return _StepEvents(list(task(dependencies)))
