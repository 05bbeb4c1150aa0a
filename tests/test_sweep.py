"""Grid files: parsing, the constraint interpreter (only whitelisted syntax runs), clear errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

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
        ("grid: {dp: [1]}\norder: speed\n", "order: unknown order 'speed'"),
        ("grid: {dp: [1]}\norder: -layers\n", "order: unknown order '-layers'"),
        ("grid: {dp: [1]}\norder: [predicted_ns]\n", "order: unknown order"),
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


def test_constraints_and_grids_are_bounded(tmp_path):
    """Issue 34, item 6: a constraint that would compute a huge number or string, and a grid of
    more points than a sweep can hold, are answered at once."""
    import time

    from lumos.estimate.sweep import MAX_GRID_POINTS

    t0 = time.perf_counter()
    assert parse_constraint("10 ** 10 ** 10 > 1", set(), "x").holds({})
    assert not parse_constraint("dp ** 1000000 < 0", {"dp"}, "x").holds({"dp": 7})
    assert parse_constraint("2 ** 10 == 1024 and 3 * 4 == 12", set(), "x").holds({})
    assert time.perf_counter() - t0 < 5  # each used to run unbounded
    with pytest.raises(TypeError, match="strings cannot be multiplied"):
        parse_constraint("'x' * 1000000000 == 'x'", set(), "x").holds({})
    axis = list(range(1, 1001))
    p = _grid(tmp_path, f"grid: {{layers: {axis}, micro_batch: {axis}}}\n")
    with pytest.raises(GridError, match=f"1,000,000 points .* more than {MAX_GRID_POINTS:,}"):
        load_grid(p)


def test_missing_grid_file_is_clear(tmp_path):
    with pytest.raises(GridError, match="cannot read the grid file"):
        load_grid(tmp_path / "nope.yaml")


@pytest.fixture(scope="module")
def real_estimator(tiny_run: Path, tmp_path_factory):
    """The estimator of the session's tiny real single-rank run (`tiny_run`), ingested."""
    from lumos.estimate.estimator import Estimator
    from warehouse.ingest import ingest

    wh = tmp_path_factory.mktemp("sweep") / "wh"
    ingest([str(tiny_run)], warehouse=wh)
    return Estimator.open(wh, "base")


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


# --- ranking by throughput (lumos.estimate.throughput; real data: the bundled gpt_cpu trace) ---

GPT_CPU_GRID = "grid:\n  layers: [4, 8]\n  micro_batch: [1, 2]\n  dp: [1, 2]\n"
_LINE = re.compile(
    r"^\s+(?P<ms>[\d.]+) ms \[.*\]\s+(?P<tps>[\d,]+) tokens/s .* (?P<desc>layers=.*)$"
)


@pytest.fixture(scope="module")
def gpt_cpu_wh(tmp_path_factory, examples) -> Path:
    from warehouse.ingest import ingest

    wh = tmp_path_factory.mktemp("gpt_cpu") / "wh"
    ingest([examples / "gpt_cpu"], warehouse=wh, job="gpt_cpu")
    return wh


def _sweep(wh: Path, grid: Path, capsys, *extra: str) -> tuple[int, list[str], str]:
    """Run `lumos sweep`: exit code, the printed configurations (their grid keys, best first)
    and stderr."""
    from lumos.cli import main

    rc = main(["sweep", "--warehouse", str(wh), "--job", "gpt_cpu", "--grid", str(grid), *extra])
    out, err = capsys.readouterr()
    ranked = [
        m["desc"].replace(" DOES NOT FIT", "") for m in map(_LINE.match, out.splitlines()) if m
    ]
    return rc, ranked, out + err


def _desc(row: dict) -> str:
    return f"layers={row['layers']} micro_batch={row['micro_batch']} dp={row['dp']}"


def test_sweep_ranks_by_tokens_per_second(gpt_cpu_wh, tmp_path, capsys, examples):
    """Default order: tokens per second, highest first (not the step time, which ranks the
    least work first); the columns are in the `estimates` view, tokens/s is the global batch in
    tokens over the step, and a CPU trace (fp32, no device) has no MFU."""
    from lumos.api import Warehouse

    grid = _grid(tmp_path, GPT_CPU_GRID)
    rc, ranked, _ = _sweep(gpt_cpu_wh, grid, capsys, "--top", "8")
    assert rc == 0 and len(ranked) == 8
    df = Warehouse.open(gpt_cpu_wh).sql(
        "SELECT layers, micro_batch, dp, predicted_ns, tokens_per_s, mfu, dtype_bytes "
        "FROM estimates WHERE job = 'gpt_cpu' AND created_at = (SELECT max(created_at) FROM estimates)"
    )
    assert len(df) == 8
    # the trace's own configuration (its measured.json): seq 32, 2 micro-batches
    traced = json.loads((examples / "gpt_cpu" / "measured.json").read_text())["config"]
    rows = df.to_dict("records")
    for r in rows:
        tokens = r["micro_batch"] * traced["num_micro_batches"] * r["dp"] * traced["seq"]
        assert r["tokens_per_s"] == pytest.approx(tokens / (r["predicted_ns"] / 1e9), rel=1e-9)
        assert r["dtype_bytes"] == 4 and r["mfu"] != r["mfu"]  # fp32 CPU run: null (NaN)
        r["tokens"] = tokens
    by_rate = [_desc(r) for r in sorted(rows, key=lambda r: -r["tokens"] / r["predicted_ns"])]
    by_step = [_desc(r) for r in sorted(rows, key=lambda r: r["predicted_ns"])]
    assert ranked == by_rate
    assert ranked != by_step  # the old order would rank the least work first
    # at equal tokens, 4 layers beat 8
    for mb in (1, 2):
        for dp in (1, 2):
            assert ranked.index(f"layers=4 micro_batch={mb} dp={dp}") < ranked.index(
                f"layers=8 micro_batch={mb} dp={dp}"
            )


def test_sweep_order_from_the_grid_and_the_flag(gpt_cpu_wh, tmp_path, capsys):
    from lumos.api import Warehouse

    grid = _grid(tmp_path, GPT_CPU_GRID + "order: predicted_ns\n")
    rc, by_grid, out = _sweep(gpt_cpu_wh, grid, capsys, "--top", "8")
    assert rc == 0 and "best 8 by predicted_ns (lowest first" in out
    rows = (
        Warehouse.open(gpt_cpu_wh)
        .sql("SELECT * FROM estimates WHERE created_at = (SELECT max(created_at) FROM estimates)")
        .to_dict("records")
    )
    assert by_grid == [_desc(r) for r in sorted(rows, key=lambda r: r["predicted_ns"])]
    # --order wins over the grid's
    rc, by_flag, out = _sweep(gpt_cpu_wh, grid, capsys, "--top", "8", "--order=-memory_bytes")
    assert rc == 0 and "best 8 by memory_bytes (highest first" in out
    rows = (
        Warehouse.open(gpt_cpu_wh)
        .sql("SELECT * FROM estimates WHERE created_at = (SELECT max(created_at) FROM estimates)")
        .to_dict("records")
    )
    mem = {_desc(r): r["memory_bytes"] for r in rows}
    assert [mem[d] for d in by_flag] == sorted(mem.values(), reverse=True)
    assert by_flag != by_grid


def test_sweep_refuses_a_bad_order(gpt_cpu_wh, tmp_path, capsys):
    grid = _grid(tmp_path, GPT_CPU_GRID + "order: fastest\n")
    rc, _, said = _sweep(gpt_cpu_wh, grid, capsys, "--no-write")
    assert rc == 2 and f"{grid}: order: unknown order 'fastest'" in said
    grid = _grid(tmp_path, GPT_CPU_GRID)
    rc, _, said = _sweep(gpt_cpu_wh, grid, capsys, "--no-write", "--order", "throughput")
    assert rc == 2 and "--order: unknown order 'throughput'" in said


def test_sweep_ranks_unfit_configurations_last(gpt_cpu_wh, tmp_path, capsys):
    """With a device too small for 8 layers, those configurations come after every 4-layer
    one whatever their tokens per second (one of them has more than two 4-layer ones)."""
    from lumos.api import Warehouse

    grid = _grid(tmp_path, GPT_CPU_GRID)
    assert _sweep(gpt_cpu_wh, grid, capsys, "--top", "8")[0] == 0
    rows = (
        Warehouse.open(gpt_cpu_wh)
        .sql("SELECT * FROM estimates WHERE created_at = (SELECT max(created_at) FROM estimates)")
        .to_dict("records")
    )
    small = max(r["memory_bytes"] for r in rows if r["layers"] == 4)
    big = min(r["memory_bytes"] for r in rows if r["layers"] == 8)
    assert small < big
    best8 = max(r["tokens_per_s"] for r in rows if r["layers"] == 8)
    assert sum(r["tokens_per_s"] < best8 for r in rows if r["layers"] == 4) >= 1
    device = f"device_memory={(small + big) // 2}"
    for order in ((), ("--order", "predicted_ns")):
        rc, ranked, out = _sweep(gpt_cpu_wh, grid, capsys, "--top", "8", "--base", device, *order)
        assert rc == 0 and len(ranked) == 8
        assert [d.split()[0] for d in ranked] == ["layers=4"] * 4 + ["layers=8"] * 4
        unfit = [line for line in out.splitlines() if "DOES NOT FIT" in line]
        assert len(unfit) == 4 and all("layers=8" in line for line in unfit)
    fits = Warehouse.open(gpt_cpu_wh).sql(
        "SELECT layers, fits FROM estimates WHERE created_at = (SELECT max(created_at) FROM estimates)"
    )
    assert {(int(r.layers), bool(r.fits)) for r in fits.itertuples()} == {(4, True), (8, False)}


def test_rank_rows_nulls_and_ties():
    from lumos.estimate.sweep import rank_rows

    rows = [
        {"predicted_ns": 5, "tokens_per_s": 10.0, "mfu": None, "fits": None},
        {"predicted_ns": 4, "tokens_per_s": 10.0, "mfu": 0.3, "fits": True},
        {"predicted_ns": 1, "tokens_per_s": 99.0, "mfu": 0.9, "fits": False},
        {"predicted_ns": 3, "tokens_per_s": 20.0, "mfu": float("nan"), "fits": float("nan")},
    ]
    assert rank_rows(rows) == [3, 1, 0, 2]  # tie at 10 tokens/s: the shorter step first
    # no MFU after an MFU (those by step time), unfit last
    assert rank_rows(rows, "-mfu") == [1, 3, 0, 2]
    assert rank_rows(rows, "predicted_ns") == [3, 1, 0, 2]


def test_mfu_formula_and_device_peaks():
    """MFU of a GPT-3-like 6.7B configuration (MHA, ffn 4h: 12 L h^2 + V h matmul parameters)
    against the closed form; recomputation is not model FLOPs; fp32 and unknown devices have
    none."""
    from lumos.estimate.config import ModelConfig
    from lumos.estimate.throughput import Device, peak_flops_of, throughput

    L, h, s, V = 32, 4096, 2048, 50257  # noqa: N806
    cfg = ModelConfig(
        layers=L, hidden=h, heads=32, seq=s, micro_batch=2, num_micro_batches=8, vocab=V,
        dp=8, tp=2, pp=2, dtype_bytes=2,
    )  # fmt: skip
    tokens = 2 * 8 * 8 * s
    flops = 6 * (12 * L * h * h + V * h) * tokens + 12 * L * h * s * tokens
    h100 = Device.of_names(["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"])
    assert h100.peak_flops == 989e12
    tps, mfu = throughput(cfg, 900_000_000, h100)
    assert tps == pytest.approx(tokens / 0.9)
    assert mfu == pytest.approx(flops / (0.9 * 32 * 989e12), rel=1e-12)
    assert 0.2 < mfu < 0.6  # a plausible MFU: the formula is of the right size
    assert throughput(cfg.replace(recompute="full"), 900_000_000, h100) == (tps, mfu)
    assert throughput(cfg.replace(dtype_bytes=4), 900_000_000, h100) == (tps, None)
    assert throughput(cfg, 900_000_000, Device.of_names([None]))[1] is None
    assert throughput(cfg, 900_000_000, None) == (tps, None)
    peaks = {
        "NVIDIA H100 PCIe": 756e12,
        "NVIDIA H100 NVL": 835e12,
        "NVIDIA H200": 989e12,
        "NVIDIA A100-SXM4-80GB": 312e12,
        "NVIDIA B200": 2250e12,
        "AMD Instinct MI300X": 1307e12,
        "Tesla V100-SXM2-32GB": 125e12,
        "NVIDIA GB200": None,
        "NVIDIA GeForce RTX 4090": 165e12,
        # names that hold another part's name: each its own row
        "NVIDIA L40S": 362e12,
        "NVIDIA L40": 181e12,
        "NVIDIA L4": 121e12,
        "NVIDIA A10": 125e12,
        "NVIDIA A10G": None,
        "NVIDIA H800 PCIe": 756e12,
        "NVIDIA A800-SXM4-80GB": 312e12,
    }
    assert {n: peak_flops_of(n) for n in peaks} == peaks
    mixed = Device.of_names(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"])
    assert mixed == Device("NVIDIA A100-SXM4-80GB", 312e12)  # the slower device sets the pace
    assert Device.of_names(["NVIDIA H100 80GB HBM3", None]).peak_flops is None


def test_job_device_from_the_trace_and_mfu_in_estimates(examples, warehouse_dir, gpt_cpu_wh):
    """The peak comes from the trace's deviceProperties (the bundled A100 trace); the rows
    written to `estimates` carry MFU against it for bf16 configurations."""
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.store import estimates_table
    from lumos.estimate.throughput import Device, job_device, model_flops_per_step
    from warehouse.ingest import ingest

    ingest([examples / "nccl_a100"], warehouse=warehouse_dir, job="nccl_a100")
    a100 = job_device(warehouse_dir, "nccl_a100")
    assert a100 == Device("NVIDIA A100-PG509-200", 312e12)
    assert job_device(warehouse_dir, "nccl_a100") == a100  # cached (device.json)
    assert job_device(gpt_cpu_wh, "gpt_cpu") == Device(None, None)  # a CPU run: no device
    est = Estimator.open(gpt_cpu_wh, "gpt_cpu")
    cfgs = [est.target({"dtype_bytes": 2}), est.target({"dtype_bytes": 2, "dp": 2})]
    preds = est.predict(cfgs)
    rows = estimates_table("s", "gpt_cpu", preds, device=a100).to_pylist()
    for p, r in zip(preds, rows, strict=True):
        seconds = p.predicted_ns / 1e9
        flops = model_flops_per_step(p.config)
        assert r["mfu"] == pytest.approx(flops / (seconds * p.config.world_size * 312e12))
    none = estimates_table("s", "gpt_cpu", preds, device=None).to_pylist()
    assert [r["mfu"] for r in none] == [None, None]
    assert [r["tokens_per_s"] for r in none] == [r["tokens_per_s"] for r in rows]


def test_a_grid_swept_in_chunks_equals_the_whole_grid(examples, warehouse_dir, tmp_path):
    """`grid_sweeps`' fan-out in this process: the chunks' rows, committed once, are the rows of
    `lumos sweep`'s single `run_sweep`; a missing chunk or a bad chunk size is refused by name."""
    import pyarrow.parquet as pq

    from pipelines.sweep_grids import (
        SweepFileError,
        commit_sweeps,
        plan_chunks,
        sweep_chunk,
        sweep_grid_file,
    )
    from warehouse.ingest import ingest

    ingest([examples / "gpt_cpu"], warehouse=warehouse_dir, job="gpt_cpu")
    grid = tmp_path / "gpt_cpu.yaml"
    grid.write_text(GPT_CPU_GRID + "  pp: [1, 2]\nconstraints:\n  - dp * pp < 4\n")
    whole = sweep_grid_file(warehouse_dir, grid)
    chunks = plan_chunks(warehouse_dir, [grid], points_per_chunk=3)
    # 16 points in chunks of 3: 0-3, 3-6, ..., 15-16
    assert [(c.start, c.stop) for c in chunks] == [(i, min(i + 3, 16)) for i in range(0, 16, 3)]
    results = [sweep_chunk(warehouse_dir, c) for c in reversed(chunks)]  # any order
    (chunked,) = commit_sweeps(warehouse_dir, results)
    assert (chunked.n_points, chunked.n_constrained, len(chunked.rows)) == (16, 4, 12)
    assert (whole.n_points, whole.n_constrained, len(whole.rows)) == (16, 4, 12)

    def stored(sweep_id: str):
        (path,) = (warehouse_dir / "estimates").glob(f"job=*/sweep={sweep_id}.parquet")
        return pq.read_table(path).drop_columns(["sweep_id", "created_at"])

    assert stored(chunked.sweep_id).equals(stored(whole.sweep_id))

    with pytest.raises(SweepFileError, match=r"gpt_cpu\.yaml: the chunks cover grid points"):
        commit_sweeps(warehouse_dir, results[:2] + results[3:])
    with pytest.raises(ValueError, match="points_per_chunk must be at least 1, got 0"):
        plan_chunks(warehouse_dir, [grid], points_per_chunk=0)
    assert len(list((warehouse_dir / "estimates").glob("job=*/sweep=*.parquet"))) == 2


def test_points_out_of_range_fail_alone_and_each_point_is_estimated_once(gpt_cpu_wh, tmp_path):
    """A point whose graph is too big fails its own graph's batch, not the grid's: every other
    point is estimated once (it was estimated again, one by one, when any point failed), its
    prediction the same as in a grid without the failing points, and the failing points are
    listed as invalid in the grid's order."""
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.sweep import load_grid, run_sweep

    class Counting(Estimator):
        """The real estimator, counting the configurations it is asked to predict."""

        asked = 0

        def predict(self, targets, *args, **kw):  # noqa: ANN001, ANN002, ANN003, ANN201
            Counting.asked += len(targets)
            return super().predict(targets, *args, **kw)

    est = Estimator.open(gpt_cpu_wh, "gpt_cpu")
    est.__class__ = Counting
    bad = tmp_path / "bad.yaml"
    bad.write_text("grid:\n  layers: [2, 80000, 4]\n  num_micro_batches: [2, 4]\n")
    good = tmp_path / "good.yaml"
    good.write_text("grid:\n  layers: [2, 4]\n  num_micro_batches: [2, 4]\n")
    res = run_sweep(est, load_grid(bad), "gpt_cpu")
    # 4 good points once each, the 2 failing ones in their batch and then alone
    assert Counting.asked == 4 + 2 * 2
    assert [p.config.layers for p in res.predictions] == [2, 2, 4, 4]
    assert len(res.invalid) == 2
    assert "{'layers': 80000}:" in res.invalid[0]  # the base's num_micro_batches is 2
    assert "'layers': 80000, 'num_micro_batches': 4}" in res.invalid[1]
    assert all("would be a graph of" in m for m in res.invalid)
    alone = run_sweep(Estimator.open(gpt_cpu_wh, "gpt_cpu"), load_grid(good), "gpt_cpu")
    assert [p.predicted_ns for p in res.predictions] == [p.predicted_ns for p in alone.predictions]
    assert [p.config for p in res.predictions] == [p.config for p in alone.predictions]
