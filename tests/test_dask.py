"""On a Dask cluster: a fleet backfill of `ingest_job` gives the replay tables of an in-process
run, and a grid swept in chunks through `sweep_job` gives the in-process sweep's rows.

Real parts throughout: a `distributed.LocalCluster` of two worker processes, a persistent Dagster
instance (SQLite, the project's dagster.yaml) in a temporary DAGSTER_HOME, Dagster's Dask executor
(through `pipelines/executors.py`), real shared traces and real warehouses. The expected tables
are the in-process paths' (`scripts/main.sh`'s runs, `lumos sweep`'s `run_sweep`); nothing is
computed by the code under test.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.backfill import BACKFILL_TAG, backfill
from pipelines.definitions import build_definitions
from pipelines.executors import DASK_SCHEDULER_ENV, job_executor
from pipelines.partitions import TRACE_JOBS
from pipelines.resources import WarehouseResource

ROOT = Path(__file__).resolve().parent.parent

# Two small real jobs (../shared/traces/README.md): rank 0 of a 2-rank A100 NCCL job, 3 steps; and
# a single-GPU Kineto trace.
JOBS = {
    "nccl": "hta/nccl_parser_config/nccl_data.json.gz",
    "linear": "param/linear/linear_kineto.json.gz",
}
# What the replay writes per job; `replay_runs` without its wall time and timestamp.
TABLES = ["iteration_replay", "replay_quality", "breakdown", "critical_path_summary", "replay_runs"]
VARYING = ["seconds", "replayed_at"]
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _require_dask() -> None:
    try:
        import dagster_dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"dask is missing under CI ({exc}): the dev extra must install it")
        pytest.skip(f"dask not installed ({exc}): pip install -e '.[dev]' (or '.[cluster]')")


def _table(warehouse: Path, name: str) -> pa.Table:
    """Every job's rows of a derived table, in a canonical order."""
    files = sorted((warehouse / name).glob("job=*/part.parquet"))
    assert files, f"{warehouse / name}: no files"
    table = pa.concat_tables([pq.ParquetFile(f).read() for f in files])
    table = table.drop_columns([c for c in VARYING if c in table.column_names])
    keys = [f.name for f in table.schema if not pa.types.is_nested(f.type)]
    return table.sort_by([(k, "ascending") for k in keys])


@pytest.fixture()
def inbox(tmp_path: Path, shared_traces: Path) -> Path:
    target = tmp_path / "inbox"
    for job, name in JOBS.items():
        (target / job).mkdir(parents=True)
        shutil.copyfile(shared_traces / name, target / job / Path(name).name)
    return target


@contextmanager
def _two_workers(tmp_path: Path) -> Iterator[tuple[Path, str, set[int]]]:
    """A Dagster home with the project's dagster.yaml and a local Dask cluster of two worker
    processes: (home, the scheduler's address, the workers' pids)."""
    from distributed import Client, LocalCluster

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        yield home, cluster.scheduler_address, set(client.run(os.getpid).values())


def test_executor_is_in_process_unless_a_scheduler_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DASK_SCHEDULER_ENV, raising=False)
    assert job_executor() is dg.in_process_executor
    with pytest.raises(ValueError, match=rf"{DASK_SCHEDULER_ENV}='localhost': expected"):
        job_executor("localhost")
    _require_dask()
    monkeypatch.setenv(DASK_SCHEDULER_ENV, "tcp://10.0.0.1:8786")
    defs = build_definitions(WarehouseResource())
    assert defs.resolve_job_def("ingest_job").executor_def.name == "dask_executor"
    assert defs.resolve_job_def("sweep_job").executor_def.name == "dask_executor"
    monkeypatch.delenv(DASK_SCHEDULER_ENV)
    defs = build_definitions(WarehouseResource())
    assert defs.resolve_job_def("sweep_job").executor_def is dg.in_process_executor


def test_dask_backfill_gives_the_in_process_replay_tables(inbox: Path, tmp_path: Path) -> None:
    _require_dask()

    # in process: what `scripts/main.sh` runs, one `ingest_job` per partition
    expected = tmp_path / "wh_in_process"
    resource = WarehouseResource(warehouse=str(expected), inbox=str(inbox))
    job_def = build_definitions(resource).resolve_job_def("ingest_job")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(TRACE_JOBS, list(JOBS))
        for job in JOBS:
            result = job_def.execute_in_process(
                instance=instance, partition_key=job, run_config=QUIET
            )
            assert result.success, job

    # on Dask: both partitions at once, their steps on the cluster's two workers
    on_dask = tmp_path / "wh_dask"
    with _two_workers(tmp_path) as (home, address, worker_pids):
        runs = backfill(
            list(JOBS),
            dagster_home=home,
            warehouse=on_dask,
            inbox=inbox,
            address=address,
            parallel=2,
        )
    assert [r.job for r in runs] == list(JOBS)
    assert all(r.success for r in runs), [r.error for r in runs]

    backfill_ids = set()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for run in runs:
            record = instance.get_run_by_id(run.run_id)
            assert record.tags["dagster/partition"] == run.job
            backfill_ids.add(record.tags[BACKFILL_TAG])
            steps = {
                e.dagster_event.step_key: e.dagster_event.pid
                for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
            }
            assert set(steps) == {
                "trace_events",
                "trace_events_checks",
                "job_replay",
                "job_replay_replay_accuracy",
                "warehouse_catalog",
            }, steps
            # every step ran in a worker process of the cluster, not in the run's process
            assert set(steps.values()) <= worker_pids, (steps, worker_pids)
    assert len(backfill_ids) == 1

    for name in TABLES:
        want, got = _table(expected, name), _table(on_dask, name)
        assert set(want.column("job").to_pylist()) >= set(JOBS), name
        assert got.equals(want), f"{name}: {got.num_rows} rows on Dask, {want.num_rows} in process"


# 16 grid points of a real H100 LLaMA run; the constraint removes dp 2 x tp 2 at each (layers,
# micro_batch): 12 configurations. Chunks of 5 points: 4 chunk steps (5, 5, 5, 1 points).
SWEEP_JOB = "llama_base"
SWEEP_GRID = """grid:
  layers: [4, 8]
  micro_batch: [4, 8]
  dp: [1, 2]
  tp: [1, 2]
constraints:
  - dp * tp <= 2
"""


def _estimates(warehouse: Path, sweep_id: str) -> pa.Table:
    """One sweep's `estimates` rows as written, in file order, without its id and time."""
    (path,) = (warehouse / "estimates").glob(f"job=*/sweep={sweep_id}.parquet")
    return pq.read_table(path).drop_columns(["sweep_id", "created_at"])


def test_dask_sweep_in_chunks_gives_the_in_process_rows(
    shared_traces: Path, tmp_path: Path
) -> None:
    _require_dask()

    from pipelines.sweep_grids import sweep_grid_file
    from pipelines.sweep_run import run_sweeps
    from warehouse.ingest import ingest

    warehouse = tmp_path / "wh"
    ingest([str(shared_traces / "gpu_h100" / SWEEP_JOB)], warehouse=warehouse, job=SWEEP_JOB)
    grids = tmp_path / "grids"
    grids.mkdir()
    (grids / f"{SWEEP_JOB}.yaml").write_text(SWEEP_GRID)
    # in process: the whole grid in one `run_sweep`, as `lumos sweep --grid` runs it
    expected = sweep_grid_file(warehouse, grids / f"{SWEEP_JOB}.yaml")
    assert (expected.n_points, len(expected.rows)) == (16, 12)

    with _two_workers(tmp_path) as (home, address, worker_pids):
        run = run_sweeps(
            dagster_home=home,
            warehouse=warehouse,
            grids=grids,
            address=address,
            points_per_chunk=5,
        )
        # a grid whose job the warehouse does not hold: the run fails, naming the file
        bad = tmp_path / "bad_grids"
        bad.mkdir()
        (bad / "gone.yaml").write_text(SWEEP_GRID)
        failed = run_sweeps(dagster_home=home, warehouse=warehouse, grids=bad, address=address)
    assert run.success, run.error
    assert not failed.success
    assert "grid_sweeps.plan_sweeps" in failed.error and "gone.yaml: job 'gone'" in failed.error

    with dg.DagsterInstance.from_config(str(home)) as instance:
        steps = {
            e.dagster_event.step_key: e.dagster_event.pid
            for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
        }
        (mat,) = [
            e.asset_materialization
            for e in instance.all_logs(
                run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
            )
        ]
    chunks = sorted(k for k in steps if k.startswith("grid_sweeps.sweep_chunk["))
    assert chunks == [f"grid_sweeps.sweep_chunk[grid0_{i}]" for i in (0, 10, 15, 5)], steps
    assert set(steps) == {"grid_sweeps.plan_sweeps", "grid_sweeps.commit_sweeps", *chunks}
    # every step, each chunk's estimates included, ran in a worker process of the cluster
    assert set(steps.values()) <= worker_pids, (steps, worker_pids)
    assert len({steps[k] for k in chunks}) == 2, "the chunks did not spread over both workers"

    # committed once: one file per sweep, the chunks' rows in grid order equal to in process
    files = sorted((warehouse / "estimates").glob("job=*/sweep=*.parquet"))
    assert len(files) == 2, files
    (dask_id,) = {f.stem.removeprefix("sweep=") for f in files} - {expected.sweep_id}
    assert mat.metadata["sweep_ids"].value == dask_id
    assert mat.metadata["chunks"].value == 4 and mat.metadata["configs"].value == 12
    want, got = _estimates(warehouse, expected.sweep_id), _estimates(warehouse, dask_id)
    assert want.num_rows == 12
    assert got.equals(want), f"{got.num_rows} rows on Dask, {want.num_rows} in process"
