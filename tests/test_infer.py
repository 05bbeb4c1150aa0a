"""Inference of a job's base configuration (issue 5, item 1): the ground-truth trainer's runs are
recovered exactly (their `lumos_groundtruth` metadata is the truth, never read by the code), a
published model (Qwen1.5-0.5B) is recognised from its trace, non-transformer traces degrade to
low confidence, and `--base` overrides win and bad ones are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch_traces import require_torch

from lumos.estimate.config import ConfigError, ModelConfig, parse_overrides

TINY = dict(layers=3, hidden=48, heads=3, seq=16, micro_batch=2, num_micro_batches=3, vocab=64)
FIELDS = ("layers", "hidden", "ffn", "heads", "seq", "micro_batch", "num_micro_batches")
FIELDS += ("vocab", "dp", "pp", "tp")


@pytest.fixture(scope="module")
def gt_warehouse(tmp_path_factory) -> Path:
    """Two real runs (~12 s and ~20 s): one rank, and pp=2 with 1F1B over 4 micro-batches whose
    stages hold different layers and whose hidden size differs from the first run's."""
    require_torch()
    from lumos.groundtruth.config import RunControl, make_config
    from lumos.groundtruth.runner import run_config
    from warehouse.ingest import ingest

    tmp = tmp_path_factory.mktemp("infer")
    control = RunControl(repeat=1, steps=1, warmup=1)
    runs = [
        make_config(TINY, name="single"),
        make_config(
            TINY, name="pp2", pp=2, layers=4, hidden=64, heads=4, num_micro_batches=4, ffn=96
        ),
    ]
    for cfg in runs:
        run_config(cfg, control, tmp / "runs", "merged", log=lambda m: None)
    ingest([str(tmp / "runs")], warehouse=tmp / "wh")
    return tmp / "wh"


def _truth(wh, job: str) -> dict:
    """The trainer's own configuration, from the trace's top-level `lumos_groundtruth`."""
    rows = wh.sql(
        f"select value_json from trace_meta where job = '{job}' and key = 'lumos_groundtruth'"
    )
    cfg = json.loads(rows["value_json"][0])["config"]
    cfg["ffn"] = cfg["ffn"] or 4 * cfg["hidden"]
    return cfg


@pytest.mark.parametrize("job", ["single", "pp2"])
def test_groundtruth_config_is_recovered(gt_warehouse, job):
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base

    wh = Warehouse.open(gt_warehouse)
    truth = _truth(wh, job)
    inf = infer_base(wh, job)
    got = {k: inf.fields[k].value for k in FIELDS}
    assert got == {k: truth[k] for k in FIELDS}
    assert inf.transformer and not inf.warnings
    for k in FIELDS:
        assert inf.fields[k].source == "trace" and inf.fields[k].confidence >= 0.5, k
    if truth["pp"] > 1:
        assert inf.fields["pp_schedule"].value == truth["pp_schedule"]
    assert inf.fields["dtype_bytes"].value == 4  # the trainer runs fp32 on the CPU


def test_overrides_win_and_are_reported_as_given(gt_warehouse):
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base

    inf = infer_base(Warehouse.open(gt_warehouse), "pp2", parse_overrides(["layers=8", "tp=1"]))
    assert inf.config.layers == 8 and inf.fields["layers"].source == "given"
    assert inf.fields["layers"].confidence == 1.0
    assert inf.config.hidden == 64 and inf.fields["hidden"].source == "trace"


def test_describe_cli_json_and_unknown_job(gt_warehouse, capsys):
    from lumos.cli import main

    assert main(["describe", "--job", "single", "--warehouse", str(gt_warehouse), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"]["layers"] == 3 and out["fields"]["hidden"]["value"] == 48
    assert out["memory"]["memory_bytes"] > 0 and out["memory"]["fits"] is None  # CPU: unknown
    assert main(["describe", "--job", "nope", "--warehouse", str(gt_warehouse)]) == 2
    assert "job 'nope' is not in the warehouse" in capsys.readouterr().err
    args = ["describe", "--job", "single", "--warehouse", str(gt_warehouse), "--base", "layrs=2"]
    assert main(args) == 2
    assert "unknown key 'layrs'" in capsys.readouterr().err
    # a given value no configuration can hold is refused, not shown with a warning and exit 0
    for given, said in [("layers=0", "layers must be >= 1, got 0"), ("tp=-2", "tp must be >= 1")]:
        assert main([*args[:-1], given]) == 2
        assert f"--base: {said}" in capsys.readouterr().err


@pytest.fixture(scope="module")
def shared_warehouse(tmp_path_factory, shared_traces) -> Path:
    from warehouse.ingest import ingest

    wh = tmp_path_factory.mktemp("shared") / "wh"
    for job, path in [
        ("qwen", "tracelens/h100_qwen1.5-0.5b_inference.json.gz"),
        ("resnet50", "kineto/resnet50_legacy_2021.pt.trace.json.gz"),
        ("dlrm", "param/dlrm_8rank/kineto"),
    ]:
        ingest([str(shared_traces / path)], warehouse=wh, job=job)
    return wh


def test_qwen_published_config(shared_warehouse):
    """Qwen1.5-0.5B's published config: 24 layers, hidden 1024, intermediate 2816, 16 heads,
    SwiGLU MLP; the trace is a bf16 batch of 16 × 559 tokens on one H100."""
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base

    inf = infer_base(Warehouse.open(shared_warehouse), "qwen")
    c = inf.config
    assert (c.layers, c.hidden, c.ffn, c.heads) == (24, 1024, 2816, 16)
    assert (c.seq, c.micro_batch, c.tp, c.pp, c.dp) == (559, 16, 1, 1, 1)
    assert c.gated_mlp and c.dtype_bytes == 2 and c.vocab == 151936
    assert c.device_memory == 85018279936  # H100 80GB totalGlobalMem
    assert all(inf.fields[k].confidence >= 0.8 for k in ("layers", "hidden", "ffn", "heads"))


@pytest.mark.parametrize("job", ["resnet50", "dlrm"])
def test_non_transformer_traces_degrade_gracefully(shared_warehouse, job):
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base

    inf = infer_base(Warehouse.open(shared_warehouse), job)
    assert not inf.transformer
    assert any("no attention operator" in w for w in inf.warnings)
    for k in ("layers", "hidden", "ffn", "heads", "seq", "micro_batch"):
        assert inf.fields[k].confidence <= 0.2, k
    if job == "dlrm":  # 8 ranks, no tensor or pipeline parallel: all data parallel
        assert (inf.config.dp, inf.config.tp, inf.config.pp) == (8, 1, 1)


def test_parse_overrides_types_and_errors():
    assert parse_overrides(["layers=48", "pp_schedule=GPipe", "sequence_parallel=yes"]) == {
        "layers": 48,
        "pp_schedule": "gpipe",
        "sequence_parallel": True,
    }
    assert parse_overrides(["device_memory=80e9"]) == {"device_memory": 80_000_000_000}
    assert parse_overrides({"tp": 2}, "grid.yaml") == {"tp": 2}
    for bad, msg in [
        (["layers"], "expected key=value"),
        (["layers=two"], "layers must be an integer"),
        (["layers=1.5"], "layers must be an integer"),
        (["pp_schedule=zb"], "pp_schedule must be one of"),
        (["foo=1"], "unknown key 'foo'"),
        (["tp=2", "tp=4"], "given twice"),
        (["recompute=some"], "recompute must be one of"),
    ]:
        with pytest.raises(ConfigError, match=msg):
            parse_overrides(bad, "--base")
    with pytest.raises(ConfigError, match="grid.yaml: gated_mlp must be true or false"):
        parse_overrides({"gated_mlp": "maybe"}, "grid.yaml")


def test_config_validate_names_the_problem():
    with pytest.raises(ConfigError, match="x.yaml: heads 5 not a multiple of tp 2"):
        ModelConfig(layers=2, hidden=40, heads=5, tp=2).validate("x.yaml")
    with pytest.raises(ConfigError, match="layers 1 fewer than pp stages 2"):
        ModelConfig(layers=1, hidden=8, heads=2, pp=2).validate()
    assert ModelConfig(hidden=64, heads=4).ffn_size == 256


def test_ffn_follows_hidden_at_the_base_ratio_unless_set():
    llama = ModelConfig(layers=4, hidden=128, ffn=344, heads=4)  # LLaMA's 8/3 x, rounded
    assert llama.derive(hidden=256).ffn == 688
    assert llama.derive(hidden=256, ffn=512).ffn == 512  # stated: kept
    assert llama.derive(layers=8).ffn == 344  # hidden unchanged: kept
    # rounded up to a multiple of the target's tp, which must divide the FFN
    assert llama.derive(hidden=200, tp=4).ffn == 540  # 537.5 -> 538 -> 540
    assert ModelConfig(hidden=128, heads=4).derive(hidden=256).ffn_size == 1024  # 0: 4 x hidden
