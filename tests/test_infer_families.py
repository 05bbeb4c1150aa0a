"""Model families the GPU corpus does not hold are read as they ran: real Hugging Face GPT-2,
Qwen3 and Phi training steps (recorded on CPU by `tests/hf_families_trace.py`, the corpus's loop).
Before, a head size stated apart from hidden / heads (Qwen3, Gemma) was taken as hidden / heads,
and an LM head tied to the embedding (GPT-2, Qwen3) counted as a second [vocab, hidden] weight
with its gradient and AdamW moments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from warehouse.ingest import ingest

TRACES = Path(__file__).parent / "data" / "hf_families"
FAMILIES = sorted(p.name for p in TRACES.iterdir() if p.is_dir())
FIELDS = (
    "layers", "hidden", "heads", "kv_heads", "seq", "micro_batch", "vocab", "ffn", "head_dim",
    "tied_embeddings",
)  # fmt: skip


@pytest.fixture(scope="module")
def inferred(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from lumos.estimate.infer import infer_base
    from warehouse.handle import WarehouseHandle

    wh = tmp_path_factory.mktemp("families") / "wh"
    report = ingest([TRACES], warehouse=wh)
    assert len(report.ingested) == len(FAMILIES) and not report.refused
    handle = WarehouseHandle.open(wh)
    return {f: infer_base(handle, f"hf_families/{f}") for f in FAMILIES}


def _truth(family: str) -> dict:
    return json.loads((TRACES / family / "measured.json").read_text())


@pytest.mark.parametrize("family", FAMILIES)
def test_every_field_is_read_as_it_ran(inferred: dict, family: str) -> None:
    truth, cfg = _truth(family), inferred[family].config
    got = {k: getattr(cfg, k) for k in FIELDS}
    want = {k: truth[k] for k in FIELDS}
    # multi-head attention leaves kv_heads at 0 (as many as the heads)
    got["kv_heads"] = cfg.kv_heads_n
    assert got == want


@pytest.mark.parametrize("family", FAMILIES)
def test_parameter_count_is_the_models(inferred: dict, family: str) -> None:
    """The parameters memory and the optimizer's re-timing count: the model's own, within what
    the layout assumes and a family may lack (biases, a learned position table: a few %)."""
    from lumos.estimate.memory import model_params

    truth = _truth(family)["params"]
    assert model_params(inferred[family].config) == pytest.approx(truth, rel=0.04)
