"""Collective costs from the device's NCCL micro-benchmarks (issue 33 item 4): the opbench tier
of the GPU estimate's collectives, checked on the real A100 rows (../shared/opbench) held out
by size, against the datasheet model, and in the estimator's choice of tier."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

A100 = "NVIDIA A100-SXM4-80GB"  # a trace's deviceProperties name; the rows are imported as:
IMPORTED = "a100-80gb"


@pytest.fixture(scope="module")
def nccl_wh(shared_opbench: Path, tmp_path_factory) -> Path:
    """A warehouse holding the A100 NCCL micro-benchmarks, imported as `lumos opbench` does."""
    from lumos.opmodel.store import import_dir

    wh = tmp_path_factory.mktemp("nccl_wh")
    import_dir(shared_opbench / "perlmutter_a100" / "nccl", IMPORTED, wh)
    return wh


@pytest.fixture(scope="module")
def halves(nccl_wh: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The all-reduce and p2p rows, every other message size of each file and layout kept for
    fitting, the rest held out."""
    from lumos.estimate.comm_bench import ALLREDUCE_FILES, P2P_FILES
    from lumos.opmodel.store import load_rows

    rows = pd.concat([load_rows(nccl_wh, IMPORTED, op) for op in (*ALLREDUCE_FILES, *P2P_FILES)])
    rows = rows.sort_values(["operator", "layout", "shape"]).reset_index(drop=True)
    rank = rows.groupby(["operator", "layout"]).cumcount()
    return rows[rank % 2 == 0], rows[rank % 2 == 1]


def test_a_trace_names_the_benchmarked_gpu(nccl_wh: Path) -> None:
    from lumos.opmodel.devices import device_key, find_device

    assert device_key(A100) == device_key("NVIDIAA100-SXM4-80GB") == "a100sxm480gb"
    assert device_key("NVIDIA A100-PCIE-40GB") != device_key(A100)
    # the rows were imported under another name: the files' GPU prefix still matches
    assert find_device(nccl_wh, A100) == IMPORTED
    assert find_device(nccl_wh, "A100-SXM4-80GB") == IMPORTED
    assert find_device(nccl_wh, "NVIDIA H100 80GB HBM3") is None
    assert find_device(nccl_wh, "NVIDIA A100-SXM4-40GB") is None
    assert find_device(nccl_wh, None) is None


def _rel_errors(pred: np.ndarray, true: np.ndarray) -> np.ndarray:
    return np.abs(pred / true - 1.0)


@pytest.mark.parametrize(
    "op, layout, n, p90",
    [
        ("allreduce", "1_2", 2, 0.06),
        ("allreduce", "1_4", 4, 0.06),
        ("allreduce_large", "1_2", 2, 0.06),
        # 13 % of its rows run > 1.3x slower per byte than the file's fastest 5 %, alternating
        # between neighbouring sizes (docs/opmodel.md): only the median tracks the curve
        ("allreduce_large", "1_4", 4, None),
        ("allreduce_large", "2_4", 8, 0.06),  # 8 ranks: two nodes of four
    ],
)
def test_held_out_all_reduces_and_the_datasheet(halves, op, layout, n, p90) -> None:
    """Fitted on every other size, the model times the sizes between within 2 % (median); the
    opmodel's interval holds most of them; the datasheet link is far off where the data say so."""
    from lumos.estimate.comm import CommModel
    from lumos.estimate.comm_bench import from_rows
    from lumos.opmodel.predict import predict

    train, test = halves
    model = from_rows(train, IMPORTED)
    assert model is not None
    part = test[(test["operator"] == op) & (test["layout"] == layout)]
    assert len(part) > 300
    y = part["dur_us"].to_numpy() * 1e3
    nbytes = part["shape"].to_numpy() * 2  # fp16 elements
    pred = np.array([model.allreduce_ns(b, n) for b in nbytes])
    err = _rel_errors(pred, y)
    assert np.median(err) <= 0.02, (op, layout, np.median(err))
    if p90 is not None:
        assert np.quantile(err, 0.9) <= p90, (op, layout, np.quantile(err, 0.9))
        curve = next(c for c in model.allreduce[layout] if c.operator == op)
        inside = predict(curve.model, part)
        covered = np.mean((part["dur_us"] >= inside.low_us) & (part["dur_us"] <= inside.high_us))
        assert covered >= 0.8 and not inside.out_of_range.any()
    sheet = np.array([CommModel.for_device(A100).allreduce_ns(b, n) for b in nbytes])
    sheet_err = np.median(_rel_errors(sheet, y))
    if layout == "1_2":  # two A100s of a Perlmutter node: a third of NVLink 3's 300 GB/s
        assert sheet_err > 0.5 and np.median(pred / y) == pytest.approx(1.0, abs=0.02)
    assert sheet_err > np.median(err)


def test_transfers_and_sizes_beyond_the_benchmarks(halves) -> None:
    from lumos.estimate.comm_bench import from_rows

    train, test = halves
    model = from_rows(train, IMPORTED)
    assert model is not None and model.gpus_per_node == 4
    part = test[(test["operator"] == "p2p") & (test["layout"] == "1_2")]
    y = part["dur_us"].to_numpy() * 1e3
    pred = np.array([model.p2p_ns(b) for b in part["shape"].to_numpy() * 2])
    assert np.median(_rel_errors(pred, y)) <= 0.02
    # a tensor-parallel activation (8 MiB) lies below every all-reduce benchmark (from 42 MB):
    # extrapolated by the smallest file's fitted c0 + bytes / bw, and the notes say so
    small = 8 * 2**20
    c = model.allreduce["1_2"][0]
    assert c.operator == "allreduce" and small < c.lo_bytes
    assert model.allreduce_ns(small, 2) == pytest.approx(
        (c.model.phys[0] + small * c.model.phys[2]) * 1e3, rel=1e-9
    )
    below = [s for s in model.take_asked() if "below the allreduce 1_2 benchmarks" in s]
    assert len(below) == 1 and not any("below" in s for s in model.notes)
    # said for the sizes asked since the last take only (a sweep's other sizes are not)
    model.allreduce_ns(c.lo_bytes * 2, 2)
    assert model.take_asked() == []
    model.allreduce_ns(small, 2)  # asked again: said again
    assert model.take_asked() == below
    # 3 ranks, no 1_3 benchmark: the 1_4 curve c0 + b·bytes read as a ring (6 steps of alpha,
    # 1.5 bytes / bw) and re-summed over 3 ranks (4 steps, 4/3 bytes / bw)
    (c4,) = (c for c in model.allreduce["1_4"] if c.lo_bytes <= 1e8 <= c.hi_bytes)
    c0, per_byte = c4.model.phys[0], c4.model.phys[2]
    t3 = model.allreduce_ns(1e8, 3)
    assert t3 == pytest.approx((4 / 6 * c0 + (4 / 3) / 1.5 * per_byte * 1e8) * 1e3, rel=1e-9)
    assert t3 < model.allreduce_ns(1e8, 4) < model.allreduce_ns(1e8, 2)
    assert any("3 ranks: no 1_3 benchmark" in s for s in model.take_asked())
    # 8 ranks span two nodes of four: the 2_4 curve, far slower than the node's NVLink
    assert model.allreduce_ns(1e8, 8) > 10 * model.allreduce_ns(1e8, 4)
    assert model.allreduce_ns(1e8, 1) == 0.0


def test_the_estimator_takes_benchmarks_of_its_own_device_only(gpu_wh, nccl_wh: Path) -> None:
    """An H100 base is not given the A100 rows (its collectives stay the datasheet's, and the
    notes say why); the same graph with its device named A100 takes them."""
    from lumos.estimate.comm import CommModel
    from lumos.estimate.comm_bench import BenchCommModel, from_opbench
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.gpu_edit import Coll

    copied = Path(gpu_wh.root) / "opbench"
    shutil.copytree(nccl_wh / "opbench", copied)
    try:
        est = Estimator.open(gpu_wh.root, "gpu_h100/llama_base")
        assert not est.comm.learned_fit  # single-GPU runs: no traced all-reduce to fit on
        tp2 = est.target({"tp": 2})
        p = est.explain(tp2)
        comm = est._gpu_model().comm
        assert type(comm) is not BenchCommModel and comm.source == "device-link"
        said = " ".join(p.warnings)
        assert "H100" in said and f"it holds {IMPORTED}: another device" in said

        est.device_name = A100  # the same graph, recorded on an A100
        est._gpu = None
        q = est.explain(tp2)
        comm = est._gpu_model().comm
        assert isinstance(comm, BenchCommModel)
        assert "NCCL micro-benchmarks" in " ".join(q.warnings)
        acts = tp2.micro_batch * tp2.seq * tp2.hidden * tp2.dtype_bytes
        expected, _ = from_opbench(gpu_wh.root, A100)
        assert expected is not None
        one = expected.allreduce_ns(acts, 2)
        # the graph's tensor-parallel all-reduces are priced by the benchmarks' 1_2 curve
        assert est._gpu_model().collective_ns(tp2)[int(Coll.TP)] == pytest.approx(one)
        assert one > 2 * CommModel.for_device(A100).allreduce_ns(acts, 2)
        assert q.predicted_ns > p.predicted_ns  # Perlmutter's pair of A100s: slower all-reduces
        # each estimate names what its own sizes needed: dp=3 has no 1_3 curve, tp=2 has one
        (r3,) = est.predict([est.target({"dp": 3})])
        assert "no 1_3 benchmark" in " ".join(r3.warnings)
        assert "no 1_3 benchmark" not in " ".join(est.explain(tp2).warnings)
    finally:
        shutil.rmtree(copied)


def test_benchmarks_without_an_all_reduce_leave_the_datasheet(
    shared_opbench: Path, tmp_path
) -> None:
    """A device whose imported benchmarks hold operators only: no curve, and the reason."""
    from lumos.estimate.comm_bench import from_opbench
    from lumos.opmodel.store import import_dir

    src = shared_opbench / "perlmutter_a100" / "operator" / "NVIDIAA100-SXM4-80GB_gelu_fp16.csv"
    (tmp_path / "bench").mkdir()
    shutil.copy(src, tmp_path / "bench" / src.name)
    import_dir(tmp_path / "bench", IMPORTED, tmp_path / "wh")
    model, why = from_opbench(tmp_path / "wh", A100)
    assert (
        model is None and why == f"{IMPORTED}'s micro-benchmarks hold no all-reduce within a node"
    )
    model, why = from_opbench(tmp_path / "empty", A100)
    assert model is None and why == f"no micro-benchmarks of {A100} in the warehouse's opbench"


def test_estimators_of_one_device_share_its_benchmarks_fit(nccl_wh: Path, tmp_path) -> None:
    """The curves are fitted once per process while the device's benchmark files stay as they
    are (each fit is 0.2-0.3 s); each caller gets a model of its own (what its pricing asked is
    said to it alone), and changed files are fitted again."""
    from lumos.estimate.comm_bench import _fitted, from_opbench

    wh = tmp_path / "wh"
    shutil.copytree(nccl_wh, wh)
    first, _ = from_opbench(wh, A100)
    before = _fitted.cache_info()
    second, _ = from_opbench(wh, A100)
    after = _fitted.cache_info()
    assert first is not None and second is not None and first is not second
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    assert first.allreduce_ns(64 << 20, 2) == second.allreduce_ns(64 << 20, 2)
    first.take_asked(), second.take_asked()
    first.allreduce_ns(1 << 40, 2)  # beyond the benchmarks: said to `first` only
    assert first.take_asked() and not second.take_asked()
    newest = max((wh / "opbench").rglob("*.parquet"), key=lambda f: f.stat().st_mtime_ns)
    newest.touch()
    from_opbench(wh, A100)
    assert _fitted.cache_info().misses == after.misses + 1
