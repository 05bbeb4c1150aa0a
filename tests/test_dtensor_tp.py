"""Tensor parallelism written with PyTorch's own DTensor API (`parallelize_module`), recorded by
the ground-truth trainer (`tp_impl: dtensor`).

Such a trace differs from a hand-written Megatron split in three ways the estimator must see:
every op of a TP block runs on a DTensor, which records the op at the *global* shapes and runs
it again on the local shard under a `PythonSubclass` frame (on this CPU the Python dispatch is
~2x the ops' own time); the all-reduces are functional collectives, waited for inside the op
that first reads their output (`_c10d_functional::wait_tensor` in a residual add); and without a
TP group the same trainer runs plain tensors. Before the rules: the FFN read 2x its width, the
base's own configuration was predicted +11 % (its waits counted as compute and re-created as
collectives), and its tp=1 configuration +83 %."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from torch_traces import require_torch

# the corpus's model (tests/data/corpus/base): its ops, not Python, fill the step
MODEL = dict(layers=4, hidden=128, heads=4, seq=128, micro_batch=2, num_micro_batches=1, vocab=1024)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """The model single-rank and DTensor TP over 2 ranks (~20 s)."""
    require_torch()
    import shutil

    from lumos.groundtruth.config import RunControl, make_config
    from lumos.groundtruth.runner import run_config

    tmp = tmp_path_factory.mktemp("dtensor")
    control = RunControl(repeat=3, steps=3, warmup=2)
    # each run recorded twice, interleaved, and the quieter recording kept (as in
    # test_dtensor_sp): a recording made while the machine is loaded moves its median step by
    # 10-20 %, and a slow base against a quick single run read as a +21 % prediction once
    kinds = (("base", {}), ("tp2d", {"tp": 2, "tp_impl": "dtensor"}))
    recorded: dict[str, list[tuple[float, Path]]] = {name: [] for name, _ in kinds}
    for r in range(2):
        for name, kw in kinds:
            cfg = make_config(MODEL, name=name, **kw)
            got = run_config(cfg, control, tmp / f"take{r}", "merged", log=lambda m: None)
            recorded[name].append((got["traced"]["step"]["median"], tmp / f"take{r}" / name))
    for name, takes in recorded.items():
        shutil.move(min(takes)[1], tmp / name)
    return tmp


@pytest.fixture(scope="module")
def wh(runs, tmp_path_factory) -> Path:
    from warehouse.ingest import ingest

    root = tmp_path_factory.mktemp("dtensor_wh") / "wh"
    for name in ("base", "tp2d"):
        ingest([runs / name], warehouse=root, job=name)
    return root


def _measured(runs: Path, name: str) -> dict:
    return json.loads((runs / name / "measured.json").read_text())


def test_config_names_the_tp_implementation():
    from lumos.groundtruth.config import ConfigError, make_config

    assert "tp_impl=dtensor" in make_config(tp=2, tp_impl="dtensor").describe()
    with pytest.raises(ConfigError, match="tp_impl must be one of"):
        make_config(tp=2, tp_impl="fsdp")
    with pytest.raises(ConfigError, match="dtensor with dp > 1"):
        make_config(tp=2, dp=2, tp_impl="dtensor")


def test_dtensor_run_computes_the_single_ranks_losses(runs):
    """The regrouped QKV shard gives each rank its own heads: the same model as one rank."""
    for a, b in zip(
        _measured(runs, "base")["traced"]["steps"],
        _measured(runs, "tp2d")["traced"]["steps"],
        strict=True,
    ):
        for r in b["ranks"]:
            assert r["loss"] == pytest.approx(a["ranks"][0]["loss"], rel=1e-5)


def test_the_trace_is_dtensors(wh):
    """What the rules below read is there: subclass frames, functional collectives."""
    from lumos.api import Warehouse

    w = Warehouse.open(wh)
    names = set(w.sql("SELECT DISTINCT name FROM events WHERE job = 'tp2d'")["name"])
    assert {"PythonSubclass", "_c10d_functional::wait_tensor", "_FromTorchTensor"} <= names
    got = w.sql(
        "SELECT name, input_dims FROM events WHERE job = 'tp2d' AND rank = 0"
        " AND name = 'aten::linear' AND input_dims LIKE '%[512, 128]%' LIMIT 1"
    )
    assert len(got) == 1  # the up projection recorded at its global width (4 x 128)


def test_describe_reads_the_local_shards(wh):
    """Inference reads the GEMMs that run on each rank's shard, not the DTensor's global ones."""
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base

    cfg = infer_base(Warehouse.open(wh), "tp2d").config
    assert (cfg.tp, cfg.hidden, cfg.ffn, cfg.heads, cfg.layers) == (2, 128, 512, 4, 4)


def test_template_separates_dispatch_and_waits(wh):
    """Each `wait_tensor` is a collective wait of the op holding it (comm_in_op_ns), and the
    ops on DTensors carry their dispatch apart (subclass_ns); the plain job has none."""
    import duckdb
    import numpy as np

    import lumos_sql
    from lumos.estimate.estimator import Estimator
    from warehouse.catalog import job_events_view

    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    job_events_view(con, "tp2d")
    cur = con.execute(lumos_sql.load("estimate/template_tasks"), {"job": "tp2d"})
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    # per step of rank 0, the waits summed independently from the events
    waits = dict(
        con.execute(
            "SELECT s.ts_ns, sum(w.dur_ns) FROM job_events s JOIN job_events w"
            " ON w.rank = s.rank AND w.ts_ns >= s.ts_ns AND w.ts_ns < s.ts_ns + s.dur_ns"
            " WHERE s.job = 'tp2d' AND s.rank = 0 AND s.name LIKE 'ProfilerStep#%'"
            " AND w.name = '_c10d_functional::wait_tensor' GROUP BY s.ts_ns ORDER BY 1"
        ).fetchall()
    )
    con.close()
    assert waits
    for k, wait_ns in enumerate(waits.values(), start=1):
        step = [r for r in rows if r["rank"] == 0 and r["step_no"] == k]
        in_op = sum(r["comm_in_op_ns"] for r in step)
        assert in_op >= wait_ns  # every wait is taken out (and the issuing ops with it)
        adds = [r for r in step if r["name"] == "aten::add" and r["comm_in_op_ns"]]
        assert adds and all(0 < r["comm_in_op_ns"] < r["dur_ns"] for r in adds)
    linears = [r for r in rows if r["name"] == "aten::linear"]
    assert linears and all(0 < r["subclass_ns"] < r["dur_ns"] for r in linears[:8])
    tpl = Estimator.open(wh, "tp2d").tpl
    assert tpl.subclass_ns.sum() > 0.1 * np.median(tpl.step_ns)
    assert not Estimator.open(wh, "base").tpl.subclass_ns.any()


def test_predictions_from_a_dtensor_base(wh, runs):
    """From the DTensor job alone: its own configuration, and tp=1, where the trainer runs plain
    tensors (measured: the single-rank run), against the measured median steps. Written with
    +2 % and +6 % here (before the rules: +11 % and +83 %)."""
    import dataclasses

    import numpy as np

    from lumos.api import Warehouse
    from lumos.estimate.calibration import Calibration
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.template import LAYER_BLOCKS

    alone = Calibration.learn(Warehouse.open(wh), "tp2d", exclude=["base"])
    est = Estimator.open(wh, "tp2d")
    est = Estimator(est.tpl, est.base, alone.comm, est.base_notes, alone.contention)
    own, tp1 = est.predict([est.base, est.base.replace(tp=1)])
    # tp=1 came out +21 % once (2026-11-27, a full local run) and +32 % in a clean-clone CI run
    # the same day (docs/estimate.md: once +46 % in CI): a DTensor base recorded slower than the
    # single run beside it only overpredicts, so its bound is wider above; both stay far inside
    # what the rules fixed (+11 % own, +83 % at tp=1)
    for pred, name, low, high in ((own, "tp2d", -0.2, 0.2), (tp1, "base", -0.2, 0.5)):
        measured = _measured(runs, name)["traced"]["step"]["median"]
        err = pred.predicted_ns / measured - 1
        assert low < err < high, (name, pred.predicted_ns, measured)
    assert any("Python dispatch" in w and "left out" in w for w in tp1.warnings)
    assert any("Python dispatch" in w and "kept per call" in w for w in own.warnings)
    # its own TP collectives are priced at what they cost its layers (whatever the
    # implementation calls: here 4 functional all-reduces per layer, waited for ops later)
    layer = np.isin(est.tpl.block, LAYER_BLOCKS)
    comm = est.explain(est.base).breakdown["communication"]
    assert comm == pytest.approx(float(est.tpl.comm_ns[layer].sum()), rel=0.01)
    # the dispatch left in the ops (the template without subclass_ns): tp=1 keeps it
    plain = dataclasses.replace(est.tpl, subclass_ns=np.zeros_like(est.tpl.subclass_ns))
    kept = Estimator(plain, est.base, alone.comm, [], alone.contention)
    assert kept.predict([est.base.replace(tp=1)])[0].predicted_ns > tp1.predicted_ns * 1.2


def test_fleet_leaves_dtensor_jobs_out_of_op_comparisons(wh):
    """A DTensor job's ops hold their dispatch under the plain ops' names and shapes: it is no
    contention, run speed or idle-gap sample for a plain base."""
    import duckdb

    import lumos_sql

    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    con.execute(lumos_sql.load("estimate/calibration_jobs"))
    got = con.execute("SELECT job FROM subclass_jobs('base', [])").fetchall()
    assert got == [("tp2d",)]
    rows = con.execute(
        lumos_sql.load("estimate/contention"), {"job": "base", "exclude": []}
    ).fetchall()
    con.close()
    assert rows == []  # the only multi-rank job is the DTensor one


def test_a_steps_skewed_waits_keep_the_median_steps_total():
    """One slow step holds most of the waits: the per-position shares sum to the median step's
    total (2 here), not to the mean's (14/3), nor to the per-position medians' (1 + 1)."""
    import numpy as np

    from lumos.estimate.template import _median_step_share

    x = np.array([[1, 9], [1, 1], [1, 1]])
    # means (1, 11/3) scaled by 2 / (14/3) = 3/7: (0.43, 1.57)
    assert _median_step_share(x).tolist() == [0, 2]
    assert _median_step_share(np.zeros((3, 2))).tolist() == [0, 0]


def test_a_tp_bases_collectives_outside_the_layers_stay_with_their_ops():
    """No transform re-creates a TP base's collectives outside the layers (DTensor's all-reduces
    of partial gradients in the optimizer): they stay with their ops' per-call part where the
    target has TP ranks, and leave at tp=1; DDP's buckets (in AccumulateGrad) are the DP
    transform's; the layers' are shared over the re-created all-reduces."""
    import numpy as np

    from lumos.estimate.comm import CommModel
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.template import BLOCK, ROLE, Template
    from lumos.estimate.transforms import Structure

    rows = [  # block, name, dur, comm
        ("f_layer", "aten::linear", 100, 0),
        ("f_layer", "aten::add", 50, 30),  # waits for the forward all-reduce
        ("b_layer", "autograd::engine::evaluate_function: MmBackward0", 200, 0),
        ("b_layer", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 10, 7),
        ("opt", "aten::_foreach_add_", 60, 40),
    ]
    tpl = Template(
        job="hand",
        block=np.array([BLOCK[r[0]] for r in rows], np.int8),
        layer=np.array([0, 0, 0, 0, -1], np.int64),
        mb=np.array([0, 0, 0, 0, -1], np.int64),
        role=np.full(len(rows), ROLE["const"], np.int8),
        bwd=np.array([0, 0, 1, 1, 0], np.int8),
        dur_ns=np.array([r[2] for r in rows], np.int64),
        gap_ns=np.zeros(len(rows), np.int64),
        end_gap_ns=0,
        step_ns=np.array([420], np.int64),
        names=[r[1] for r in rows],
        comm_ns=np.array([r[3] for r in rows], np.int64),
    )
    base = ModelConfig(layers=1, hidden=8, heads=2, seq=4, tp=2)
    est = Estimator(tpl, base, CommModel.default(), [])
    assert est.tp_outside.tolist() == [0, 0, 0, 0, 40]
    assert est._tp_comm == 30  # the layers' own, without DDP's bucket
    tp2, tp1 = Structure(layers=1, tp=2), Structure(layers=1, tp=1)
    assert (est._fixed(tp2) - est._fixed(tp1)).tolist() == [0, 0, 0, 0, 40]
    plain = Estimator(tpl, base.replace(tp=1), CommModel.default(), [])
    assert not plain.tp_outside.any() and plain._tp_comm is None
