"""Record a real Megatron-LM (megatron-core) tensor-parallel GPT trace on CPU, one file per rank.

Megatron is what most large training runs use: its tensor-parallel linears
(`LinearWithGradAccumulationAndAsyncCommunication`), their all-reduces
(`_ReduceFromModelParallelRegion`), the vocabulary-parallel embedding and cross-entropy, and
sequence-first activations `[s, b, h]` are what inference must read. The files this writes are
kept in `tests/data/megatron_tp2/` (`TRUTH` below is the configuration they ran), so the tests
need neither megatron-core nor the time to record; rerun it to refresh them:

    pip install megatron-core==0.16.1   # and torch, as the `train` extra
    python tests/megatron_trace.py tests/data/megatron_tp2

Megatron assumes CUDA for its device buffer and its RNG tracker: those four calls are pointed at
the CPU's (`_cpu_only`); every layer, autograd function and collective is Megatron's own, over
gloo.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
from pathlib import Path

# The model and the step every rank runs (Megatron pads the vocabulary to a multiple of
# 128 x tp: 1000 -> 1024). Sizes are distinct so that no dimension can pass for another.
TRUTH = dict(
    layers=3, hidden=128, heads=4, ffn=512, seq=80, micro_batch=3, vocab=1024, tp=2, pp=1, dp=1
)
VOCAB_GIVEN = 1000
PORT = 29533


def _cpu_only() -> None:
    import megatron.core.tensor_parallel.random as mrandom
    import torch

    torch.cuda.current_device = lambda: "cpu"  # the global memory buffer's device
    torch.cuda.get_rng_state = lambda *a, **k: torch.get_rng_state()
    mrandom._get_cuda_rng_state = lambda *a, **k: torch.get_rng_state()
    mrandom._set_cuda_rng_state = lambda state, *a, **k: torch.set_rng_state(state)


def _rank(rank: int, out: str) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(PORT))
    world = TRUTH["tp"]
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    _cpu_only()
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel
    from megatron.core.transformer.transformer_config import TransformerConfig

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=world)
    tensor_parallel.model_parallel_cuda_manual_seed(123)
    cfg = TransformerConfig(
        num_layers=TRUTH["layers"],
        hidden_size=TRUTH["hidden"],
        num_attention_heads=TRUTH["heads"],
        ffn_hidden_size=TRUTH["ffn"],
        use_cpu_initialization=True,
        tensor_model_parallel_size=world,
        params_dtype=torch.float32,
        pipeline_dtype=torch.float32,
    )
    model = GPTModel(
        config=cfg,
        transformer_layer_spec=get_gpt_layer_local_spec(),
        vocab_size=TRUTH["vocab"],
        max_sequence_length=TRUTH["seq"],
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    b, s = TRUTH["micro_batch"], TRUTH["seq"]
    tokens = torch.randint(0, VOCAB_GIVEN, (b, s))
    position = torch.arange(s).unsqueeze(0).expand(b, s)
    mask = torch.ones(1, 1, s, s, dtype=torch.bool).triu(1)

    def ready(p) -> None:  # noqa: ANN001
        p.export_chrome_trace(str(Path(out) / f"rank{rank}.json"))

    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=2),
        on_trace_ready=ready,
    ) as prof:
        for _ in range(3):
            opt.zero_grad()
            loss = model(tokens, position, mask, labels=tokens).mean()
            loss.backward()
            opt.step()
            prof.step()
    dist.destroy_process_group()


def record(out: Path) -> None:
    """Run the ranks and write their `rank<N>.json.gz` into `out`."""
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    mp.spawn(_rank, args=(str(out),), nprocs=TRUTH["tp"])
    for rank in range(TRUTH["tp"]):
        raw = out / f"rank{rank}.json"
        with raw.open("rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()


if __name__ == "__main__":
    record(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/megatron_tp2"))
