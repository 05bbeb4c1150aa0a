"""A real Megatron-LM trace (megatron-core's GPT, tensor parallel 2, recorded on CPU by
`tests/megatron_trace.py`) is read as what it is: tensor parallelism from its process groups
(not from the compound groups Megatron also names), sequence-first activations `[s, b, h]`,
attention written out as GEMMs, the vocabulary split over the tensor-parallel ranks. Before,
it read as pp=2, seq 3, micro-batch 80, 2 heads, vocabulary 512, replicated."""

from __future__ import annotations

from pathlib import Path

import pytest
from megatron_trace import TRUTH

from warehouse.ingest import ingest

TRACES = Path(__file__).parent / "data" / "megatron_tp2"


@pytest.fixture(scope="module")
def megatron_wh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    wh = tmp_path_factory.mktemp("megatron") / "wh"
    report = ingest([TRACES], warehouse=wh, job="megatron")
    assert len(report.ingested) == TRUTH["tp"] and not report.refused
    return wh


@pytest.fixture(scope="module")
def megatron(megatron_wh: Path):
    from lumos.estimate.infer import infer_base
    from warehouse.handle import WarehouseHandle

    return infer_base(WarehouseHandle.open(megatron_wh), "megatron")


def test_megatron_configuration_is_read_as_it_ran(megatron) -> None:
    cfg = megatron.config
    got = {k: getattr(cfg, k) for k in TRUTH}
    assert got == TRUTH
    assert cfg.vocab_parallel and cfg.fused_qkv and not cfg.flash_attention
    assert cfg.kv_heads == TRUTH["heads"]


def test_megatron_evidence_names_what_was_read(megatron) -> None:
    ev = {k: v.evidence for k, v in megatron.fields.items()}
    assert "[s, b, h]" in ev["seq"] or "scores" in ev["seq"]
    assert "tensor parallel" in ev["tp"]
    assert "_VocabParallelCrossEntropy" in ev["vocab_parallel"]
    assert "baddbmm" in ev["layers"]


def test_a_megatron_base_is_cut_into_layers_by_its_score_gemms(megatron_wh: Path) -> None:
    """No operator is named for Megatron's local attention: the template finds the layers by
    the scores' GEMM (`aten::baddbmm`), so layers can be added (it refused before: 0 attention
    operators, no layer annotation)."""
    from lumos.api import Warehouse
    from lumos.estimate.estimator import Estimator

    est = Estimator.open(megatron_wh, "megatron")
    base, double = est.predict([est.base, est.base.replace(layers=2 * TRUTH["layers"])])
    steps = Warehouse.open(megatron_wh).sql(
        "select median(dur_ns) as m from events where rank = 0 and name like 'ProfilerStep#%'"
    )
    assert base.predicted_ns == pytest.approx(float(steps["m"][0]), rel=0.05)
    # the layers are most of the step: twice as many take well over 1.5x, under 2x
    assert 1.5 < double.predicted_ns / base.predicted_ns < 2.0
