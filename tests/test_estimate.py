"""Estimation end to end on a real ground-truth run: `lumos estimate` (JSON fields, the base
configuration predicts its own median step, layers monotonic), a 1,000-configuration `lumos
sweep` into the `estimates` table, `estimate_vs_measured` and the
template cut without the trainer's annotations (the same run's trace with them stripped)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
from torch_traces import TINY_GPT

from lumos.cli import main


@pytest.fixture(scope="module")
def gt_warehouse(tiny_run: Path, tmp_path_factory) -> Path:
    """The session's tiny real run (`tiny_run`), copied beside its own warehouse, ingested."""
    from warehouse.ingest import ingest

    tmp = tmp_path_factory.mktemp("estimate")
    shutil.copytree(tiny_run, tmp / "runs")
    ingest([str(tmp / "runs")], warehouse=tmp / "wh")
    return tmp / "wh"


def _estimate(wh: Path, capsys, *sets: str) -> dict:
    assert (
        main(["estimate", "--warehouse", str(wh), "--job", "base", "--json", "--set", *sets]) == 0
    )
    return json.loads(capsys.readouterr().out)


def test_estimate_json_and_base_identity(gt_warehouse, capsys):
    measured = json.loads((gt_warehouse.parent / "runs" / "base" / "measured.json").read_text())
    spans = [s["profiler_step_span_ns"] for s in measured["traced"]["steps"]]
    out = _estimate(gt_warehouse, capsys, "layers=2")
    for key in ("predicted_ns", "interval_ns", "breakdown", "memory_bytes", "fits", "warnings"):
        assert key in out
    lo, hi = out["interval_ns"]
    assert lo <= out["predicted_ns"] <= hi
    # the base configuration replays its own median traced step (ProfilerStep span)
    assert abs(out["predicted_ns"] - sorted(spans)[len(spans) // 2]) <= 0.01 * out["predicted_ns"]
    b = out["breakdown"]
    assert b["forward"] > 0 and b["backward"] > b["forward"] and b["communication"] == 0


def test_estimate_transforms_move_the_prediction_the_right_way(gt_warehouse, capsys):
    base = _estimate(gt_warehouse, capsys, "layers=2")["predicted_ns"]
    more = _estimate(gt_warehouse, capsys, "layers=4")["predicted_ns"]
    wider = _estimate(gt_warehouse, capsys, "hidden=64", "heads=2")["predicted_ns"]
    faster = _estimate(gt_warehouse, capsys, "speedup.all=2")["predicted_ns"]
    tp = _estimate(gt_warehouse, capsys, "tp=2", "dp=2", "pp=2", "num_micro_batches=4")
    assert more > base and wider > base and faster < base
    assert tp["breakdown"]["communication"] > 0 and tp["warnings"]
    # DDP's buckets overlap the backward: only their exposed part is in the step, and the
    # phases, the exposed communication and the idle time add up to the step
    for sets in (["dp=16"], ["dp=2", "tp=2", "pp=2", "num_micro_batches=4"]):
        b = _estimate(gt_warehouse, capsys, *sets)
        parts = {k: v for k, v in b["breakdown"].items() if k != "critical_stage"}
        assert parts["idle"] >= 0 and parts["overlapped_comm"] >= 0, parts
        assert sum(v for k, v in parts.items() if k != "overlapped_comm") == b["predicted_ns"]


def test_sharding_says_its_collectives_are_not_in_the_time(gt_warehouse, capsys):
    """ZeRO / FSDP sharding is modelled as the memory it saves: its all-gathers and
    reduce-scatters are not re-created (an FSDP2 job of 2 CPU ranks ran 1.9x the step predicted
    for its own configuration), and every estimate that involves it says so."""
    plain = _estimate(gt_warehouse, capsys, "dp=2")
    sharded = _estimate(gt_warehouse, capsys, "dp=2", "zero_stage=3")
    assert sharded["memory_bytes"] < plain["memory_bytes"]
    said = [w for w in sharded["warnings"] if "zero_stage 0 -> 3" in w]
    assert said and "not in the time" in said[0], sharded["warnings"]
    assert not any("zero_stage" in w for w in plain["warnings"])


def test_estimate_bad_keys_exit_2(gt_warehouse, capsys):
    assert (
        main(["estimate", "--warehouse", str(gt_warehouse), "--job", "base", "--set", "lay=2"]) == 2
    )
    assert "unknown key 'lay'" in capsys.readouterr().err
    assert (
        main(["estimate", "--warehouse", str(gt_warehouse), "--job", "base", "--set", "tp=3"]) == 2
    )
    assert "not a multiple of tp" in capsys.readouterr().err
    argv = ["estimate", "--warehouse", str(gt_warehouse), "--job", "base"]
    assert main([*argv, "--set", "heads=3"]) == 2
    assert re.search(r"hidden \d+ not a multiple of heads 3", capsys.readouterr().err)
    assert main(["estimate", "--warehouse", str(gt_warehouse), "--job", "nope"]) == 2
    assert "job 'nope' is not in the warehouse (known: " in capsys.readouterr().err


@pytest.mark.parametrize(
    ("sets", "said"),
    [
        (["speedup.all=1e-12"], "must be between 1/1000 and 1000"),
        (["speedup.all=1e308"], "must be between 1/1000 and 1000"),
        (["hidden=10000000", "seq=10000000", "micro_batch=1000"], "out of range"),
        (["layers=99999999"], "the estimator builds at most 5,000,000"),
        (["layers=140000"], "the estimator builds at most 5,000,000"),
        (["speedup.all=inf"], "speedup.all must be a finite number > 0"),
        (["dp=2", "dp=4"], "dp given twice"),
        (["layers=0"], "--set: layers must be >= 1, got 0"),
        (["zero_stage=4"], "--set: zero_stage must be 0, 1, 2 or 3, got 4"),
        (["vocab=0"], "--set: vocab=0 means 'not known'"),
        (["speedup.gemm=2", "speedup.gemm=4"], "speedup.gemm given twice"),
    ],
)
def test_estimate_out_of_range_is_a_message(gt_warehouse, capsys, sets, said):
    """Sizes or speed-ups far out of range: a message and exit 2, where the int64 durations
    overflowed into a traceback, 10^8 layers exhausted the machine's memory, and a key given
    twice was taken at its last value."""
    argv = ["estimate", "--warehouse", str(gt_warehouse), "--job", "base", "--set", *sets]
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_a_sweep_lists_its_out_of_range_points_and_estimates_the_rest(
    gt_warehouse, tmp_path, capsys
):
    grid = tmp_path / "grid.yaml"
    grid.write_text("grid:\n  layers: [2, 4]\n  seq: [128, 1000000000]\n")
    argv = ["sweep", "--warehouse", str(gt_warehouse), "--job", "base", "--grid", str(grid)]
    assert main([*argv, "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "2 estimated" in out
    assert out.count("the configuration is out of range") == 2
    # nothing estimated at all: exit 2, said
    grid.write_text("grid:\n  tp: [3, 5]\n")
    assert main([*argv, "--no-write"]) == 2
    assert "no configuration of the grid was estimated" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main([*argv, "--no-write", "--top", "-1"])
    assert usage.value.code == 2
    assert "must be a whole number >= 0" in capsys.readouterr().err


def test_sweep_1000_configs_through_the_cli(gt_warehouse, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(
        "grid:\n  layers: [2, 4, 6, 8, 10]\n  seq: [16, 32]\n  micro_batch: [1, 2, 4, 8, 16]\n"
        "  num_micro_batches: [1, 2, 4, 8, 16]\n  pp: [1, 2]\n  dp: [1, 2]\n"
        "constraints: ['layers >= pp']\n"
    )  # 5·2·5·5·2·2 = 1000 points
    assert (
        main(["sweep", "--warehouse", str(gt_warehouse), "--job", "base", "--grid", str(grid)]) == 0
    )
    out = capsys.readouterr().out
    assert "1000 estimated" in out
    from lumos.api import Warehouse

    wh = Warehouse.open(gt_warehouse)
    df = wh.sql("SELECT * FROM estimates")
    assert len(df) == 1000 and df["sweep_id"].nunique() == 1
    assert (df["interval_low_ns"] <= df["predicted_ns"]).all()
    assert (df["predicted_ns"] <= df["interval_high_ns"]).all()
    keys = ["seq", "micro_batch", "num_micro_batches", "pp", "dp"]
    for _, g in df.groupby(keys):
        g = g.sort_values("layers")
        assert g["predicted_ns"].is_monotonic_increasing, "more layers was faster"
    pairs = wh.sql("SELECT * FROM estimate_vs_measured WHERE measured_job = 'base'")
    assert len(pairs) == 1 and abs(pairs["rel_error"].iloc[0]) < 0.01
    # the base's configuration but recomputing every layer: another run, not the measured one
    argv = ["estimate", "--warehouse", str(gt_warehouse), "--job", "base", "--save"]
    assert main([*argv, "--set", "recompute=full"]) == 0
    wh = Warehouse.open(gt_warehouse)
    pairs = wh.sql("SELECT * FROM estimate_vs_measured WHERE measured_job = 'base'")
    assert len(pairs) == 1 and set(wh.sql("SELECT recompute FROM estimates")["recompute"]) == {
        "none",
        "full",
    }


# the trainer's own annotations: real (Megatron / HF) traces have none of them
_TRAINER_ANN = re.compile(
    r"^(layer_\d+|forward_mb\d+|backward_mb\d+|Forward \d+|Backward \d+|embedding|lm_head|loss"
    r"|optimizer)$"
)


def _strip(src: Path, dst: Path, job: str, layer_as: str | None = None) -> None:
    """Copy the run's traces to `dst` without the trainer's annotations (torch's own
    `Optimizer.step#...` stays); `layer_as` renames `layer_<i>` to a module-style name instead."""
    dst.mkdir(parents=True)
    for f in src.glob("*.json.gz"):
        d = json.loads(gzip.decompress(f.read_bytes()))
        events = []
        for e in d["traceEvents"]:
            name = str(e.get("name"))
            if e.get("cat") == "user_annotation" and _TRAINER_ANN.match(name):
                if layer_as is None or not name.startswith("layer_"):
                    continue
                e = {**e, "name": layer_as.format(i=name[6:])}
            events.append(e)
        d["traceEvents"] = events
        d["job_name"] = job
        d.pop("lumos_groundtruth", None)
        (dst / f.name).write_bytes(gzip.compress(json.dumps(d).encode()))


@pytest.fixture(scope="module")
def stripped_warehouse(gt_warehouse) -> Path:
    """The base run's trace without annotations (job `plain`) and with module-style layer names
    only (job `modules`: `model.layers.<i>`, as with_modules / HF traces name them)."""
    from warehouse.ingest import ingest

    runs = gt_warehouse.parent / "runs"
    _strip(runs / "base", gt_warehouse.parent / "stripped" / "plain", "plain")
    _strip(
        runs / "base", gt_warehouse.parent / "stripped" / "modules", "modules", "model.layers.{i}"
    )
    ingest([str(gt_warehouse.parent / "stripped")], warehouse=gt_warehouse.parent / "wh_stripped")
    return gt_warehouse.parent / "wh_stripped"


@pytest.mark.parametrize("job", ["plain", "modules"])
def test_template_without_trainer_annotations(gt_warehouse, stripped_warehouse, job):
    from lumos.api import Warehouse
    from lumos.estimate.template import BLOCK, extract_template

    ref = extract_template(Warehouse.open(gt_warehouse), "base", cache=False)
    got = extract_template(Warehouse.open(stripped_warehouse), job, cache=False)
    assert got.names == ref.names
    assert (got.dur_ns == ref.dur_ns).all() and (got.gap_ns == ref.gap_ns).all()
    for col in ("layer", "role", "bwd"):
        assert (getattr(got, col) == getattr(ref, col)).all(), col
    # the one difference: the loop's bookkeeping between micro-batch m's backward and m+1's
    # forward (loss.detach().item()) is outside every forward_mb annotation (the head) but is
    # the next micro-batch's loop body when nothing says otherwise
    moved = [i for i in range(ref.n) if (got.block[i], got.mb[i]) != (ref.block[i], ref.mb[i])]
    assert [ref.names[i] for i in moved] == ["aten::detach", "aten::item"] * (
        TINY_GPT["num_micro_batches"] - 1
    )
    assert all(ref.block[i] == BLOCK["head"] and got.block[i] == BLOCK["f_pre"] for i in moved)


def test_predictions_without_trainer_annotations(gt_warehouse, stripped_warehouse):
    from lumos.api import Warehouse
    from lumos.estimate.comm import CommModel
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.template import extract_template

    ref = Estimator.open(gt_warehouse, "base")
    got = Estimator.open(stripped_warehouse, "plain")
    assert got.base == ref.base
    # the templates are under test, not the host laws (contention, working set, idle gaps,
    # which re-time the moved ops by a few %): both without them
    ref, got = (Estimator(e.tpl, e.base, CommModel.default(), []) for e in (ref, got))
    # the ops that move between micro-batch m's backward and m+1's forward (see above) sit in
    # micro-batch m+1's forward instead of the step's head: with pipeline stages or more
    # micro-batches, one boundary's worth of them (work + the idle gap before each) lands on
    # the critical path once more or once less; nothing else may differ
    rt = extract_template(Warehouse.open(gt_warehouse), "base", cache=False)
    gt = extract_template(Warehouse.open(stripped_warehouse), "plain", cache=False)
    moved = [i for i in range(rt.n) if (gt.block[i], gt.mb[i]) != (rt.block[i], rt.mb[i])]
    boundary_ns = int(rt.dur_ns[moved].sum() + rt.gap_ns[moved].sum()) // (
        TINY_GPT["num_micro_batches"] - 1
    )
    for change, tol_ns in [
        ({"layers": 4}, 0),
        ({"hidden": 64}, 0),
        ({"dp": 2}, 0),
        ({"pp": 2}, boundary_ns),
        ({"num_micro_batches": 4}, boundary_ns),
    ]:
        a = ref.explain(ref.target(change)).predicted_ns
        b = got.explain(got.target(change)).predicted_ns
        assert abs(b - a) <= tol_ns + 1, (change, a, b, boundary_ns)


def test_estimate_forward_only_trace_is_a_clear_message(shared_traces, tmp_path, capsys):
    """An inference trace (HF Qwen on an H100, forward only): a message, never a traceback."""
    from warehouse.ingest import ingest

    src = shared_traces / "tracelens" / "h100_qwen1.5-0.5b_inference.json.gz"
    (tmp_path / "qwen").mkdir()
    (tmp_path / "qwen" / src.name).symlink_to(src)
    ingest([str(tmp_path / "qwen")], warehouse=tmp_path / "wh")
    argv = ["estimate", "--warehouse", str(tmp_path / "wh"), "--job", "qwen", "--set", "layers=48"]
    assert main(argv) == 2
    out = capsys.readouterr().err
    assert "qwen: the traced step has no backward operator" in out and "inference" in out


def test_estimate_legacy_trace_says_why_it_is_refused(shared_traces, tmp_path, capsys):
    """The 2021 ResNet-50 training trace: its steps are `Operator` (cpu_op) ProfilerSteps and its
    backward bare autograd nodes. It was refused as having no ProfilerStep, then as inference;
    the message names what is missing."""
    from warehouse.ingest import ingest

    src = shared_traces / "kineto" / "resnet50_legacy_2021.pt.trace.json.gz"
    ingest([src], warehouse=tmp_path / "wh", job="resnet")
    argv = ["estimate", "--warehouse", str(tmp_path / "wh"), "--job", "resnet", "--set", "dp=2"]
    assert main(argv) == 2
    out = capsys.readouterr().err
    assert "resnet: the traced step's backward is in the legacy form of PyTorch before 1.10" in out


def _rows(names: list[str], links: dict[int, int], opt_from: int) -> list[dict]:
    """template_tasks.sql-shaped rows of one step, 1 us per op (links: backward -> forward)."""
    return [
        dict(rank=0, step_no=1, step_ns=len(names) * 1000, rel_ns=i * 1000, dur_ns=1000,
             gap_ns=0, name=n, event_idx=i, fwd_event_idx=links.get(i), layer=None, fwd_mb=None,
             bwd_mb=None, in_optimizer=i >= opt_from, part=None, mod_layer=None)
        for i, n in enumerate(names)
    ]  # fmt: skip


def test_period_cut_of_an_all_forwards_first_step():
    """GPipe order (both forwards, then both backwards), no annotation: blocks by hand."""
    from lumos.estimate.template import BLOCK, ROLE, template_from_rows

    layer = ["aten::layer_norm", "aten::linear", "aten::scaled_dot_product_attention",
             "aten::linear", "aten::add"]  # fmt: skip
    fwd = ["aten::embedding", *layer, *layer, "aten::layer_norm", "aten::linear",
           "aten::cross_entropy_loss"]  # fmt: skip
    names = ["aten::randint", *fwd, *fwd]  # 0 | mb0 1..14 | mb1 15..28
    links: dict[int, int] = {}
    for f0 in (15, 1):  # backward of mb1 first, each op linked to its forward op
        names.append("aten::ones_like")
        for j in reversed(range(len(fwd))):
            links[len(names)] = f0 + j
            names.append("autograd::engine::evaluate_function: XBackward0")
    names += ["aten::mul_", "aten::add_"]
    tpl = template_from_rows("gpipe", _rows(names, links, opt_from=len(names) - 2))
    b = tpl.block
    assert b[0] == BLOCK["head"] and list(tpl.mb[1:29]) == [0] * 14 + [1] * 14
    for f0 in (1, 15):
        assert b[f0] == BLOCK["f_pre"] and tpl.role[f0] == ROLE["emb"]
        assert list(b[f0 + 1 : f0 + 11]) == [BLOCK["f_layer"]] * 10
        assert list(tpl.layer[f0 + 1 : f0 + 11]) == [0] * 5 + [1] * 5
        assert list(b[f0 + 11 : f0 + 14]) == [BLOCK["f_post"]] * 3
    assert tpl.role[14] == ROLE["tok_v"] and tpl.role[13] == ROLE["gemm_head"]
    bwd = slice(29, 29 + 2 * (1 + len(fwd)))
    assert list(tpl.mb[bwd]) == [1] * 15 + [0] * 15 and tpl.bwd[bwd].all()
    assert b[29] == BLOCK["b_post"] and list(tpl.layer[33:43]) == [1] * 5 + [0] * 5
    assert list(b[-2:]) == [BLOCK["opt"]] * 2


def test_the_first_estimate_after_an_ingest_says_it_is_learning(tmp_path, capsys):
    """Building the template and the calibration jobs' laws takes seconds on a large warehouse: the first
    estimate after an ingest says so on stderr, later ones (cache current) are silent."""
    from lumos.api import Warehouse

    corpus = Path(__file__).parent / "data" / "corpus"
    wh = Warehouse.open(tmp_path / "wh", create=True)
    wh.ingest([str(corpus / "base")], job="base")
    argv = ["estimate", "--warehouse", str(tmp_path / "wh"), "--job", "base", "--set", "layers=8"]
    assert main(argv) == 0
    assert "learning base's template" in capsys.readouterr().err
    assert main(argv) == 0
    assert capsys.readouterr().err == ""
    wh.ingest(
        [str(corpus / "layers_x2")], job="layers_x2"
    )  # the calibration jobs changed: learn again
    assert main(argv) == 0
    assert "learning base's template" in capsys.readouterr().err
