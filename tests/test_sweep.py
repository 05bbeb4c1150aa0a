"""Grid files: parsing, the constraint interpreter (only whitelisted syntax runs), clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch_traces import require_torch

from lumos.estimate.sweep import GridError, load_grid, parse_constraint


def _grid(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "grid.yaml"
    p.write_text(text)
    return p


def test_grid_product_and_constraints(tmp_path):
    g = load_grid(
        _grid(
            tmp_path,
            "base: {hidden: 256}\n"
            "grid: {dp: [1, 2, 4], pp: [1, 2], tp: [1, 2], speedup.gemm: [1, 2]}\n"
            "constraints: ['dp * pp * tp == 4', 'not (pp == 2 and speedup_gemm > 1)']\n",
        )
    )
    assert g.size == 24 and g.base == {"hidden": 256}
    env = [dict(p) for p in g.points()]
    ok = [
        p
        for p in env
        if all(c.holds({k.replace(".", "_"): v for k, v in p.items()}) for c in g.constraints)
    ]
    # dp*pp*tp == 4: (4,1,1) (2,2,1) (2,1,2) (1,2,2); pp == 2 only without a GEMM speed-up
    assert len(ok) == 2 * 2 + 2 * 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("grid: {layerz: [1, 2]}\n", "unknown key 'layerz'"),
        ("grid: {dp: [1, x]}\n", "dp must be an integer"),
        ("grid: {speedup.warp: [2]}\n", "unknown kernel class 'warp'"),
        ("grid: {dp: [1]}\nconstraints: ['dp * qq == 4']\n", "unknown key 'qq'"),
        ("grid: {dp: [1]}\nconstraints: ['dp ==']\n", "is not an expression"),
        ('grid: {dp: [1]}\nconstraints: [\'__import__("os").system("x")\']\n', "may be called"),
        ("grid: {dp: [1]}\nconstraints: ['dp.real == 1']\n", "Attribute is not allowed"),
        ("grid: {dp: [1]}\nconstraints: ['[dp][0] == 1']\n", "not allowed"),
        ("grid: {dp: [1]}\nextra: 1\n", "unknown section"),
        ("grid: {dp: [1]}\nhost_cores: 0\n", "host_cores: must be a positive whole number"),
        ("grid: {dp: [1]}\nhost_cores: two\n", "host_cores: must be a positive whole number"),
        ("grid: {dp: [1]}\nhost_cores: true\n", "host_cores: must be a positive whole number"),
        ("grid: {}\n", "non-empty mapping"),
        ("base: {tp: two}\ngrid: {dp: [1]}\n", "tp must be an integer"),
        ("grid: [1, 2\n", "not valid YAML"),
        ("grid: {layers: [4, 8, 4]}\n", "layers lists 4 more than once"),
        ("grid: {dp: [1, 2, '2', 1.0]}\n", "dp lists 1, 2 more than once"),
        ("grid: {layers: [0, 4]}\n", "layers must be >= 1, got 0"),
        ("grid: {dtype_bytes: [2, 3]}\n", "dtype_bytes must be 1, 2, 4 or 8, got 3"),
        ("base: {layers: -1}\ngrid: {dp: [1]}\n", "base: layers must be >= 1, got -1"),
    ],
)
def test_grid_errors_name_the_file_and_problem(tmp_path, text, message):
    p = _grid(tmp_path, text)
    with pytest.raises(GridError, match=message) as e:
        load_grid(p)
    assert str(p) in str(e.value)


def test_constraint_interpreter_arithmetic():
    c = parse_constraint(
        "max(dp, 2) ** 2 // 3 % 5 + abs(-pp) >= 2 or layers / 0 == 1", {"dp", "pp", "layers"}, "x"
    )
    assert c.holds({"dp": 3, "pp": 1, "layers": 4})


def test_missing_grid_file_is_clear(tmp_path):
    with pytest.raises(GridError, match="cannot read the grid file"):
        load_grid(tmp_path / "nope.yaml")


TINY = dict(layers=2, hidden=32, heads=2, seq=16, micro_batch=2, num_micro_batches=2, vocab=64)


@pytest.fixture(scope="module")
def real_estimator(tmp_path_factory):
    """The estimator of one real single-rank training run (~10 s), ingested."""

    require_torch()
    from lumos.estimate.estimator import Estimator
    from lumos.groundtruth.config import RunControl, make_config
    from lumos.groundtruth.runner import run_config
    from warehouse.ingest import ingest

    tmp = tmp_path_factory.mktemp("sweep")
    run_config(
        make_config(TINY, name="base"), RunControl(repeat=1, steps=1, warmup=1), tmp / "runs",
        "merged", log=lambda m: None,
    )  # fmt: skip
    ingest([str(tmp / "runs")], warehouse=tmp / "wh")
    return Estimator.open(tmp / "wh", "base")


def test_compressed_sweep_equals_full_graphs_and_single_estimates(real_estimator):
    """On a real template: the sweep path (merged runs) predicts exactly what the full graphs
    and the single-estimate path (pure-Python replay of the full graph) predict."""
    est = real_estimator
    sets = [
        {},
        {"layers": 5},
        {"hidden": 64, "seq": 32},
        {"pp": 2, "num_micro_batches": 6},
        {"pp": 2, "num_micro_batches": 3, "pp_schedule": "gpipe", "dp": 4},
        {"tp": 2, "dp": 2, "micro_batch": 4},
        {"layers": 6, "pp": 3, "tp": 2, "dp": 2, "num_micro_batches": 5},
    ]
    speeds = [{}, {"gemm": 2.0}, {}, {"comm": 3.0}, {"all": 1.5}, {"attn": 4.0}, {}]
    targets = [est.target(s) for s in sets]
    merged = est.predict(targets, speeds, parallel=False, compressed=True)
    full = est.predict(targets, speeds, parallel=False, compressed=False)
    single = [est.explain(t, sp) for t, sp in zip(targets, speeds, strict=True)]
    for m, f, one in zip(merged, full, single, strict=True):
        assert m.predicted_ns == f.predicted_ns == one.predicted_ns > 0
        assert m.interval_ns == f.interval_ns == one.interval_ns
        assert (m.memory_bytes, m.fits, m.warnings) == (f.memory_bytes, f.fits, f.warnings)
    for t in targets:
        cg = est.compressed(est.structure(t))
        assert cg.n_tasks < cg.run_of.size  # fewer runs than tasks
