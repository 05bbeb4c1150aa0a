"""The Dagster wiring on a real instance and real traces: definitions load (in a subprocess, as
`dagster dev` would), the ingestion asset and its checks materialise, a refused file fails a check
visibly, the sensor registers new jobs once, the schedule requests what is missing, the sweep asset
runs a folder of grid files, and the main job runs end to end (with its sweep).

Expected values come from the bundled traces' README (dlrm_8rank: 8 files, ranks 0-7; nccl_a100:
rank 0 of a 2-rank job; gpt_cpu: one rank of this project's trainer), from counting `traceEvents`
with the standard `json` module, and from enumerating the grid files' points in the test.
"""

from __future__ import annotations

import base64
import gzip
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_run import materialize_job

from lumos.api import Warehouse
from pipelines.assets.catalog import warehouse_catalog
from pipelines.assets.ingest import TraceEventsConfig, job_files, trace_events
from pipelines.assets.replay import job_replay
from pipelines.assets.sweeps import grid_sweeps
from pipelines.checks import trace_events_checks
from pipelines.checks_replay import replay_accuracy
from pipelines.definitions import defs
from pipelines.partitions import TRACE_JOBS
from pipelines.resources import WarehouseResource
from pipelines.schedules import nightly_ingest
from pipelines.sensors import inbox_sensor
from warehouse.ingest import ingest

ROOT = Path(__file__).resolve().parent.parent
ASSETS = [trace_events, trace_events_checks, warehouse_catalog]


def _count_events(path: Path) -> int:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return len(json.load(fh)["traceEvents"])


@pytest.fixture()
def inbox(tmp_path: Path, examples: Path) -> Path:
    """A private copy of the bundled jobs (README and licences included: they must be ignored)."""
    target = tmp_path / "inbox"
    shutil.copytree(examples, target)
    return target


def _resources(inbox: Path, warehouse: Path) -> dict[str, object]:
    return {"lumos": WarehouseResource(warehouse=str(warehouse), inbox=str(inbox))}


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def test_definitions_load_with_the_dagster_cli(tmp_path: Path) -> None:
    """What `dagster dev` does first: load `[tool.dagster] module_name` with our dagster.yaml."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "Validation successful for code location pipelines.definitions" in proc.stdout + proc.stderr
    )

    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == {
        "trace_events",
        "job_replay",
        "warehouse_catalog",
        "grid_sweeps",
    }
    assert {c.name for c in graph.asset_check_keys} == {
        "ranks_complete",
        "no_refused_files",
        "has_events",
        "replay_accuracy",
    }
    assert warehouse_catalog.op.pool == "catalog"
    assert defs.resolve_sensor_def("inbox_sensor").job_name == "ingest_job"
    sweep_job = defs.resolve_job_def("sweep_job")
    assert {k.to_user_string() for k in sweep_job.asset_layer.selected_asset_keys} == {
        "grid_sweeps"
    }
    assert defs.resolve_schedule_def("nightly_ingest").cron_schedule == "0 2 * * *"


def test_trace_events_materialises_a_real_job_and_its_checks_pass(
    inbox: Path, warehouse_dir: Path
) -> None:
    result = materialize_job(ASSETS, "dlrm_8rank", inbox, warehouse_dir)
    assert result.success
    (mat,) = result.asset_materializations_for_node("trace_events")
    meta = {k: v.value for k, v in mat.metadata.items()}
    files = sorted((inbox / "dlrm_8rank").iterdir())
    assert meta["files"] == meta["files_ingested"] == 8
    assert meta["files_refused"] == 0
    assert meta["ranks"] == "0,1,2,3,4,5,6,7"
    assert meta["events"] == sum(_count_events(f) for f in files)
    assert meta["bytes"] == sum(f.stat().st_size for f in files)

    checks = _checks(result)
    assert set(checks) == {"ranks_complete", "no_refused_files", "has_events"}
    assert all(c.passed for c in checks.values()), checks
    assert all(c.partition == "dlrm_8rank" for c in checks.values())
    assert (warehouse_dir / "lumos.duckdb").is_file()
    assert len(result.asset_materializations_for_node("warehouse_catalog")) == 1


def test_refused_file_and_missing_rank_fail_checks_visibly(
    inbox: Path, tmp_path: Path, warehouse_dir: Path
) -> None:
    # Files outside the inbox, given through the asset's config: rank 0 of a 2-rank job (bundled
    # README) and a JSON file that is not a trace at all.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copyfile(inbox / "nccl_a100" / "nccl_data.json.gz", elsewhere / "rank0.json.gz")
    (elsewhere / "rank1.json").write_text('{"not": "a trace"}', encoding="utf-8")
    paths = [str(elsewhere / "rank0.json.gz"), str(elsewhere / "rank1.json")]
    result = materialize_job(
        ASSETS,
        "partial",
        inbox,
        warehouse_dir,
        run_config={"ops": {"trace_events": {"config": {"paths": paths}}}},
    )
    assert result.success  # failing checks do not fail the run: the catalog is still rebuilt
    (mat,) = result.asset_materializations_for_node("trace_events")
    assert mat.metadata["files_refused"].value == 1
    assert "rank1.json" in mat.metadata["refused"].value
    checks = _checks(result)
    refused = checks["no_refused_files"]
    assert not refused.passed and refused.severity == dg.AssetCheckSeverity.ERROR
    assert "rank1.json" in refused.metadata["errors"].value
    ranks = checks["ranks_complete"]
    assert not ranks.passed and ranks.severity == dg.AssetCheckSeverity.WARN
    assert ranks.metadata["ranks_missing"].value == "1"
    assert checks["has_events"].passed
    assert len(result.asset_materializations_for_node("warehouse_catalog")) == 1


def test_a_job_missing_from_the_inbox_is_a_clear_failure(inbox: Path, tmp_path: Path) -> None:
    resource = WarehouseResource(warehouse=str(tmp_path / "wh"), inbox=str(inbox))
    assert len(job_files("dlrm_8rank", resource, TraceEventsConfig())) == 8
    with pytest.raises(dg.Failure, match=r"job 'gone' has no trace files in inbox .*dlrm_8rank"):
        job_files("gone", resource, TraceEventsConfig())


def test_inbox_sensor_registers_new_jobs_once(inbox: Path, tmp_path: Path) -> None:
    resources = _resources(inbox, tmp_path / "wh")
    with dg.instance_for_test() as instance:

        def tick(cursor: str | None):
            # the daemon's part: evaluate, then apply the partition requests to the instance
            context = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources)
            data = inbox_sensor(context)
            for request in data.dynamic_partitions_requests or []:
                instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
            return data

        first = tick(None)
        bundled = ["dlrm_8rank", "gpt_cpu", "nccl_a100"]
        assert sorted(r.partition_key for r in first.run_requests) == bundled
        assert sorted(instance.get_dynamic_partitions(TRACE_JOBS)) == bundled

        second = tick(first.cursor)
        assert not second.run_requests
        assert not second.dynamic_partitions_requests

        # new jobs dropped into the inbox (a directory, a loose file): registered and requested,
        # the others are not
        shutil.copytree(inbox / "nccl_a100", inbox / "new_job")
        shutil.copyfile(inbox / "nccl_a100" / "nccl_data.json.gz", inbox / "solo.pt.trace.json.gz")
        third = tick(second.cursor)
        assert sorted(r.partition_key for r in third.run_requests) == ["new_job", "solo"]
        assert instance.has_dynamic_partition(TRACE_JOBS, "new_job")
        assert instance.has_dynamic_partition(TRACE_JOBS, "solo")
        assert not tick(third.cursor).run_requests

        # a rank added to a known job: requested again, not registered again
        shutil.copyfile(
            inbox / "nccl_a100" / "nccl_data.json.gz", inbox / "new_job" / "rank1.json.gz"
        )
        fourth = tick(third.cursor)
        assert [r.partition_key for r in fourth.run_requests] == ["new_job"]
        assert not fourth.dynamic_partitions_requests


def test_one_bad_inbox_entry_is_reported_and_skipped(inbox: Path, tmp_path: Path) -> None:
    """Issue 34, item 3: a folder `dup/` beside a file `dup.json.gz` and a link to the inbox
    itself are reported and skipped; every other job is registered and requested, and the
    skipped job's partition fails with the reason."""
    trace = inbox / "nccl_a100" / "nccl_data.json.gz"
    (inbox / "dup").mkdir()
    shutil.copyfile(trace, inbox / "dup" / "rank0.json.gz")
    shutil.copyfile(trace, inbox / "dup.json.gz")
    (inbox / "selflink").symlink_to(inbox, target_is_directory=True)
    resources = _resources(inbox, tmp_path / "wh")
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, cursor=None, resources=resources)
        data = inbox_sensor(context)
        assert sorted(r.partition_key for r in data.run_requests) == [
            "dlrm_8rank",
            "gpt_cpu",
            "nccl_a100",
        ]
    resource = WarehouseResource(warehouse=str(tmp_path / "wh"), inbox=str(inbox))
    with pytest.raises(dg.Failure, match=r"job 'dup' .*claimed by 2 entries"):
        job_files("dup", resource, TraceEventsConfig())
    with pytest.raises(dg.Failure, match=r"job 'selflink' .*holds the inbox itself"):
        job_files("selflink", resource, TraceEventsConfig())
    assert len(job_files("nccl_a100", resource, TraceEventsConfig())) == 1


def test_nightly_schedule_requests_jobs_not_yet_materialised() -> None:
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(TRACE_JOBS, ["a", "b"])
        instance.report_runless_asset_event(
            dg.AssetMaterialization(trace_events.key, partition="a")
        )
        when = datetime(2026, 11, 22, 2, 0, tzinfo=UTC)
        repo = defs.get_repository_def()
        data = nightly_ingest.evaluate_tick(
            dg.build_schedule_context(
                instance=instance, scheduled_execution_time=when, repository_def=repo
            )
        )
        assert [r.partition_key for r in data.run_requests] == ["b"]

        instance.report_runless_asset_event(
            dg.AssetMaterialization(trace_events.key, partition="b")
        )
        data = nightly_ingest.evaluate_tick(
            dg.build_schedule_context(
                instance=instance, scheduled_execution_time=when, repository_def=repo
            )
        )
        (only,) = data.run_requests
        assert only.partition_key is None
        assert only.asset_selection == [warehouse_catalog.key]


def test_main_job_end_to_end_then_a_fast_no_op(tmp_path: Path, inbox: Path) -> None:
    from pipelines.main import run_main

    paths = {
        "dagster_home": tmp_path / "dagster_home",
        "warehouse": tmp_path / "wh",
        "inbox": inbox,
    }
    out = io.StringIO()
    first = run_main(**paths, out=out)
    assert [o.job for o in first.outcomes] == ["dlrm_8rank", "gpt_cpu", "nccl_a100"]
    assert all(o.success for o in first.outcomes)
    jobs = first.tables["jobs"].set_index("job")
    assert jobs.loc["dlrm_8rank", "ranks"] == 8
    assert jobs.loc["nccl_a100", "ranks"] == 1
    assert jobs.loc["gpt_cpu", "ranks"] == 1
    expected = {
        "dlrm_8rank": sum(_count_events(f) for f in (inbox / "dlrm_8rank").iterdir()),
        "gpt_cpu": _count_events(inbox / "gpt_cpu" / "rank-0.pt.trace.json.gz"),
        "nccl_a100": _count_events(inbox / "nccl_a100" / "nccl_data.json.gz"),
    }
    assert jobs["events"].to_dict() == expected
    categories = first.tables["categories"]
    assert {job: int(categories[job].sum()) for job in expected} == expected
    assert "dlrm_8rank" in out.getvalue() and "events per category" in out.getvalue()

    # the runs and partitions are in the persistent instance that `dagster dev` would show
    instance = dg.DagsterInstance.from_config(str(paths["dagster_home"]))
    assert sorted(instance.get_dynamic_partitions(TRACE_JOBS)) == sorted(expected)
    assert len(instance.get_runs()) == 3
    assert instance.get_materialized_partitions(trace_events.key) == set(expected)

    # the replay step: every rank and metric of each job, model error against the trace's own
    # measurement (DLRM: one CPU step and one GPU span per rank, README of the bundled traces)
    replay = first.tables["replay"]
    dlrm = replay[replay["job"] == "dlrm_8rank"]
    assert sorted(set(dlrm["rank"])) == list(range(8))
    assert set(dlrm["metric"]) == {"cpu_step", "gpu_span"}
    assert (replay["model_max_pct"] >= 0).all()
    assert "replayed vs measured" in out.getvalue().lower()

    # the sweep step: every point of the bundled grid that its constraint keeps, one row each in
    # the warehouse's `estimates`; more layers never faster, all else equal
    grid_doc = yaml.safe_load((ROOT / "examples" / "grids" / "gpt_cpu.yaml").read_text())
    axes = grid_doc["grid"]
    kept = [
        dict(zip(axes, values, strict=True))
        for values in itertools.product(*axes.values())
        if values[list(axes).index("dp")] * values[list(axes).index("pp")] <= 4
    ]
    assert grid_doc["constraints"] == ["dp * pp <= 4"]
    sweep = first.tables["sweep"]
    assert set(sweep["job"]) == {"gpt_cpu"}
    got = sorted(tuple(int(r[k]) for k in axes) for r in sweep.to_dict("records"))
    assert got == sorted(tuple(p.values()) for p in kept)
    stored = Warehouse.open(paths["warehouse"]).sql(
        "select count(*) as n from estimates where job = 'gpt_cpu' and sweep_id = "
        f"'{sweep['sweep_id'].iloc[0]}'"
    )
    assert int(stored["n"].iloc[0]) == len(kept)
    others = [k for k in axes if k != "layers"]
    for _, group in sweep.groupby(others):
        times = group.sort_values("layers")["predicted_ns"].to_list()
        assert times == sorted(times), group
    assert (sweep["interval_low_ns"] <= sweep["predicted_ns"]).all()
    assert (sweep["predicted_ns"] <= sweep["interval_high_ns"]).all()
    text = out.getvalue()
    assert "gpt_cpu.yaml: job 'gpt_cpu'" in text and "predicted_ms" in text and "high_ms" in text
    assert "best by -tokens_per_s" in text and "tokens_per_s" in text and "mfu" in text

    second = run_main(**paths, out=io.StringIO())
    assert all(o.metadata["files_ingested"] == 0 for o in second.outcomes)
    assert second.tables["jobs"]["events"].to_list() == jobs["events"].to_list()


def test_replay_asset_and_its_accuracy_check_on_a_real_job(
    inbox: Path, warehouse_dir: Path
) -> None:
    """The replay asset materialises per job partition after ingestion; its check judges the
    model replay of every rank against the trace's measured iterations."""
    result = materialize_job(
        [trace_events, job_replay, replay_accuracy], "dlrm_8rank", inbox, warehouse_dir
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("job_replay")
    assert mat.metadata["ranks"].value == 8
    _assert_report(mat, warehouse_dir / "reports" / "dlrm_8rank.html")
    check = _checks(result)["replay_accuracy"]
    assert check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["metrics_checked"].value == 16  # 8 ranks x (cpu_step, gpu_span)
    assert check.passed, check.description


def _assert_report(mat: dg.AssetMaterialization, html: Path) -> None:
    """The materialisation names the job's HTML report and shows a PNG preview of it."""
    assert mat.metadata["report"].value == str(html) and html.is_file()
    preview = mat.metadata["preview"].value
    prefix = "](data:image/png;base64,"
    assert prefix in preview
    png = base64.b64decode(preview.split(prefix, 1)[1].rstrip(")"))
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and html.with_suffix(".png").read_bytes() == png


def _failure(result: dg.ExecuteInProcessResult) -> str:
    """The innermost message of the run's step failure (Dagster wraps ours)."""
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            return error.message if error.cause is None else error.cause.message
    return ""


def test_sweep_asset_runs_every_grid_file_and_names_a_bad_one(
    examples: Path, tmp_path: Path, warehouse_dir: Path
) -> None:
    ingest([examples / "gpt_cpu"], warehouse=warehouse_dir, job="gpt_cpu")
    grids = tmp_path / "grids"
    grids.mkdir()
    (grids / "gpt_cpu.yaml").write_text(
        "grid:\n  layers: [2, 4]\n  dp: [1, 2]\n  pp: [1, 2]\nconstraints:\n  - dp * pp < 4\n"
    )
    (grids / "notes.txt").write_text("not a grid file: ignored")
    resources = {
        "lumos": WarehouseResource(
            warehouse=str(warehouse_dir), inbox=str(examples), grids=str(grids)
        )
    }
    result = dg.materialize([grid_sweeps], resources=resources)
    assert result.success
    (mat,) = result.asset_materializations_for_node("grid_sweeps")
    meta = {k: v.value for k, v in mat.metadata.items()}
    assert meta["grids"] == 1
    _assert_report(mat, warehouse_dir / "reports" / "gpt_cpu.html")
    assert meta["configs"] == 6  # 2 x 2 x 2 points minus (dp 2, pp 2) at both layer counts
    assert meta["best_job"] == "gpt_cpu"
    assert meta["seconds"] > 0
    stored = Warehouse.open(warehouse_dir).sql(
        "select layers, dp, pp, predicted_ns, tokens_per_s, mfu, fits from estimates "
        "where job = 'gpt_cpu' order by tokens_per_s desc"
    )
    assert len(stored) == 6 and stored["fits"].isna().all() and stored["mfu"].isna().all()
    # the best is lumos sweep's: by tokens per second (the global batch over the step), which
    # is not the shortest step here (dp 2 does twice the tokens in less than twice the time)
    top = stored.iloc[0]
    assert meta["order"] == "-tokens_per_s"
    assert meta["best_tokens_per_s"] == round(top["tokens_per_s"], 1)
    assert meta["best_predicted_ms"] == round(top["predicted_ns"] / 1e6, 3)
    assert top["predicted_ns"] > stored["predicted_ns"].min() and int(top["dp"]) == 2
    assert "tokens/s" in meta["best"] and "MFU unknown" in meta["best"]
    assert {(r.dp, r.pp) for r in stored.itertuples()} == {(1, 1), (1, 2), (2, 1)}

    # a bad grid file fails the run, naming the file, and nothing more is written
    (grids / "gpt_cpu.yaml").write_text("grid:\n  layerz: [2, 4]\n")
    result = dg.materialize([grid_sweeps], resources=resources, raise_on_error=False)
    assert not result.success
    assert "gpt_cpu.yaml" in _failure(result) and "layerz" in _failure(result)
    # a grid for a job the warehouse does not hold: the file and its job are named
    (grids / "gpt_cpu.yaml").unlink()
    (grids / "gone.yaml").write_text("grid:\n  layers: [2, 4]\n")
    result = dg.materialize([grid_sweeps], resources=resources, raise_on_error=False)
    assert not result.success
    assert "gone.yaml" in _failure(result) and "'gone'" in _failure(result)
    assert len(Warehouse.open(warehouse_dir).sql("select * from estimates")) == 6
