"""A CPU trace's step graph (issue 33, item 1: the same graph as a GPU trace's, without GPU
tasks), built, replayed and edited by the code the GPU estimator uses: the CPU ground-truth
corpus's base (its trainer pauses ~250 ms between steps) and the Hugging Face families the GPU
corpus does not hold (tests/data/hf_families: GPT-2's Conv1D, Qwen3's head size and q/k norms,
Phi's parallel attention and MLP), whose layers must be found and copied whole."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from step_graphs import layer_tasks

from kernels.graph import Kind
from warehouse.ingest import ingest

DATA = Path(__file__).parent / "data"
FAMILIES = sorted(p.name for p in (DATA / "hf_families").iterdir() if p.is_dir())
JOBS = ["base", *(f"hf_families/{f}" for f in FAMILIES)]
# a replay of the step as it ran (the profiler's cost kept) against the traced steps' median
REPLAY_TOLERANCE = 0.10


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from lumos.estimate.gpu_step import load_gpu_step
    from lumos.estimate.infer import infer_base
    from lumos.estimate.template import shape_roles
    from warehouse.handle import WarehouseHandle

    wh = tmp_path_factory.mktemp("cpu_graph") / "wh"
    ingest([DATA / "corpus" / "base"], warehouse=wh, job="base", build_catalog=False)
    ingest([DATA / "hf_families"], warehouse=wh)
    handle = WarehouseHandle.open(wh)
    out = {}
    for job in JOBS:
        cfg = infer_base(handle, job).config
        out[job] = load_gpu_step(handle, job, sizes=shape_roles(cfg), cpu_trace=True), cfg
    return out


@pytest.mark.parametrize("job", JOBS)
def test_a_cpu_step_replays_to_its_traced_step(steps: dict, job: str) -> None:
    """No GPU task; each thread's first task waits for the step's start, not for the thread's
    last task of the step before (the corpus trainer's pause between steps replayed the base
    6.5x its length); the step as it ran replays to its traced length."""
    from lumos.estimate.gpu_estimate import GpuModel

    step, cfg = steps[job]
    assert not step.is_gpu.any() and step.n > 0
    got = GpuModel(step, cfg).explain(cfg).traced_ns
    measured = float(np.median(step.step_ns))
    assert abs(got / measured - 1) <= REPLAY_TOLERANCE, (got, measured)


def test_a_cpu_step_without_the_profiler_costs_cpu_activity_alone(steps: dict) -> None:
    """The corpus base's step graph without the profiler against the step its run measured
    without it: a CPU trace's profiler records no CUDA runtime call, so its cost per event is
    `CPU_EVENT_NS` (0.65 µs), not the 3.5 µs learned with CUDA activity (-25 % here)."""
    import json

    from lumos.estimate.gpu_estimate import GpuModel
    from lumos.estimate.profiler_cost import CPU_EVENT_NS, PROFILER_EVENT_NS

    step, cfg = steps["base"]
    measured = json.loads((DATA / "corpus" / "base" / "measured.json").read_text())
    unprofiled = measured["unprofiled"]["step"]["median"]
    model = GpuModel(step, cfg)
    assert model.event_ns == CPU_EVENT_NS
    assert abs(model.explain(cfg).predicted_ns / unprofiled - 1) <= REPLAY_TOLERANCE
    cuda = GpuModel(step, cfg, event_ns=PROFILER_EVENT_NS).explain(cfg).predicted_ns
    assert cuda / unprofiled - 1 < -REPLAY_TOLERANCE


@pytest.mark.parametrize("job", JOBS)
def test_layer_and_micro_batch_edits_copy_whole_pieces(steps: dict, job: str) -> None:
    """Twice the layers: every target layer's forward operators are its base layer's
    (`layer_map`), in order, and the backward runs the layers last to first; twice the
    micro-batches: the forward and backward operators twice, the optimizer's once."""
    from lumos.estimate.gpu_edit import edit_step, layer_map
    from lumos.estimate.gpu_step import BLOCK_BWD, BLOCK_FWD
    from lumos.estimate.template import BLOCK

    step, cfg = steps[job]
    L, M = cfg.layers, cfg.num_micro_batches
    op = Kind.CPU_OP
    ed = edit_step(step, 2 * L, M, L, M)
    by_layer: dict[int, list[str]] = {}
    for ly, name in layer_tasks(step, fwd=True, kind=op):
        by_layer.setdefault(ly, []).append(name)
    assert sorted(by_layer) == list(range(L))
    want = [(j, n) for j, b in enumerate(layer_map(L, 2 * L)) for n in by_layer[b]]
    assert sorted(layer_tasks(step, ed, fwd=True, kind=op)) == sorted(want)
    bwd = layer_tasks(step, ed, fwd=False, kind=op)
    first = [ly for i, (ly, _) in enumerate(bwd) if i == 0 or bwd[i - 1][0] != ly]
    assert first[: 2 * L] == list(range(2 * L))[::-1]

    ed = edit_step(step, L, 2 * M, L, M)
    ops = step.kind == int(op)
    passes = ops & np.isin(step.block, (*BLOCK_FWD, *BLOCK_BWD))
    once = ops & np.isin(step.block, (BLOCK["opt"], BLOCK["tail"]))
    got = Counter(zip(passes[ed.base].tolist(), once[ed.base].tolist(), strict=True))
    assert got[(True, False)] == 2 * int(passes.sum())
    assert got[(False, True)] == int(once.sum())


def test_each_layer_op_knows_its_side_of_the_attention(steps: dict) -> None:
    """Which layer ops work on the queries and which on the keys and values (`template.PATH`),
    read from the op order every Hugging Face attention has: Q, K, V projections, then a rotary
    embedding on the queries and on the keys. Qwen3's Q and K norms sit between the
    projections; Phi rotates part of each head; GPT-2 projects Q, K and V in one GEMM and has
    no rotary, so nothing is named there. The backward ops take their forward op's side."""
    from lumos.estimate.template import BLOCK, PATH

    for family, norms in (("qwen3", True), ("phi", False), ("gpt2", None)):
        step, cfg = steps[f"hf_families/{family}"]
        names = step.tasks.column("name").to_pylist()
        fwd = (step.block == BLOCK["f_layer"]) & (step.layer == 0)
        bwd = (step.block == BLOCK["b_layer"]) & (step.layer == 0)
        side = {p: fwd & (step.path == PATH[p]) for p in ("queries", "keys_values")}
        if norms is None:
            assert not (step.path > 0).any(), family
            continue
        q_ops = Counter(names[i].split("::")[-1] for i in np.flatnonzero(side["queries"]))
        kv_ops = Counter(names[i].split("::")[-1] for i in np.flatnonzero(side["keys_values"]))
        assert q_ops["linear"] >= 1 and kv_ops["linear"] >= 2, family  # Q; K and V
        # the rotary embedding's run on each side: the same ops
        assert q_ops["neg"] == kv_ops["neg"] >= 1 and q_ops["cat"] == kv_ops["cat"], family
        assert (q_ops["rsqrt"] >= 1 and kv_ops["rsqrt"] >= 1) == norms, family
        for p in ("queries", "keys_values"):
            assert (bwd & (step.path == PATH[p])).sum() > 0, (family, p)
