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
def megatron(tmp_path_factory: pytest.TempPathFactory):
    from lumos.estimate.infer import infer_base
    from warehouse.handle import WarehouseHandle

    wh = tmp_path_factory.mktemp("megatron") / "wh"
    report = ingest([TRACES], warehouse=wh, job="megatron")
    assert len(report.ingested) == TRUTH["tp"] and not report.refused
    return infer_base(WarehouseHandle.open(wh), "megatron")


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
