"""Record real Hugging Face training steps of model families other than the GPU corpus's.

Inference must read a family it was not written against: GPT-2 (fused QKV through `Conv1D`'s
`addmm`, learned positions, LM head tied to the embedding), Qwen3 (a head size stated apart
from hidden / heads, grouped-query attention, tied head) and Phi (parallel attention and MLP,
partial rotary, its own head). The loop is the GPU corpus's (`../shared/traces/gpu_h100`):
bf16 autocast over fp32 weights, foreach AdamW, SDPA attention, `loss.item()`; on the CPU, one
thread. Sizes are distinct so that no dimension can pass for another. The files are kept in
`tests/data/hf_families/<family>/` with the configuration they ran (`measured.json`), so the
tests need neither `transformers` nor the time to record; rerun it to refresh them:

    pip install transformers==5.18.0   # and torch, as the `train` extra
    python tests/hf_families_trace.py tests/data/hf_families
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

LAYERS, HIDDEN, HEADS, SEQ, MICRO_BATCH, VOCAB = 3, 160, 5, 72, 3, 1000


def _models() -> dict:
    import transformers as T

    common = dict(vocab_size=VOCAB, max_position_embeddings=SEQ, attn_implementation="sdpa")
    return {
        "gpt2": T.GPT2LMHeadModel(
            T.GPT2Config(
                n_layer=LAYERS,
                n_embd=HIDDEN,
                n_head=HEADS,
                n_inner=640,
                n_positions=SEQ,
                vocab_size=VOCAB,
                attn_implementation="sdpa",
            )
        ),
        "qwen3": T.Qwen3ForCausalLM(
            T.Qwen3Config(
                num_hidden_layers=LAYERS,
                hidden_size=HIDDEN,
                intermediate_size=416,
                num_attention_heads=HEADS,
                num_key_value_heads=1,
                head_dim=48,
                tie_word_embeddings=True,
                **common,
            )
        ),
        "phi": T.PhiForCausalLM(
            T.PhiConfig(
                num_hidden_layers=LAYERS,
                hidden_size=HIDDEN,
                intermediate_size=448,
                num_attention_heads=HEADS,
                **common,
            )
        ),
    }


def _truth(name: str, model) -> dict:  # noqa: ANN001
    c = model.config
    heads = getattr(c, "num_attention_heads", getattr(c, "n_head", HEADS))
    stated = getattr(c, "head_dim", None)
    return dict(
        family=name,
        layers=LAYERS,
        hidden=HIDDEN,
        heads=heads,
        seq=SEQ,
        micro_batch=MICRO_BATCH,
        vocab=VOCAB,
        kv_heads=getattr(c, "num_key_value_heads", heads) or heads,
        ffn=getattr(c, "intermediate_size", None) or getattr(c, "n_inner", None),
        head_dim=stated if stated and stated * heads != HIDDEN else 0,
        tied_embeddings=bool(c.tie_word_embeddings),
        params=sum(p.numel() for p in model.parameters()),
        transformers=__import__("transformers").__version__,
        torch=__import__("torch").__version__,
    )


def record(out: Path) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.manual_seed(0)
    torch.set_num_threads(1)
    for name, model in _models().items():
        model.train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        ids = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ))

        def step(model=model, opt=opt, ids=ids) -> None:  # noqa: ANN001
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            loss.item()

        for _ in range(2):
            step()
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        raw = d / "rank0.json"
        with profile(
            activities=[ProfilerActivity.CPU],
            schedule=schedule(wait=1, warmup=1, active=2),
            record_shapes=True,
            on_trace_ready=lambda p, raw=raw: p.export_chrome_trace(str(raw)),
        ) as prof:
            for _ in range(4):
                step()
                prof.step()
        with raw.open("rb") as src, gzip.open(d / "rank0.json.gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        raw.unlink()
        (d / "measured.json").write_text(json.dumps(_truth(name, model), indent=1) + "\n")


if __name__ == "__main__":
    record(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/hf_families"))
