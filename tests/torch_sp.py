"""Record a torchtitan-style training run with DTensor tensor and sequence parallelism over 2
gloo ranks (`record_sp`), or the same model on one rank: what a trainer written with PyTorch's
own API records (separate Q, K, V projections; `SequenceParallel` norms, so the residual stream
is sharded by tokens and gathered and scattered around each block; a vocabulary-parallel
embedding). Used by tests/test_dtensor_sp.py; torch is imported only when a run is recorded."""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from pathlib import Path

SIZES = dict(vocab=1000, seq=64, hidden=128, layers=4, batch=2, heads=4)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _model():  # noqa: ANN202 - torch types are imported lazily
    import torch.nn.functional as F
    from torch import nn

    v, h, nh = SIZES["vocab"], SIZES["hidden"], SIZES["heads"]

    class Attn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wq, self.wk, self.wv, self.wo = (nn.Linear(h, h, bias=False) for _ in range(4))

        def forward(self, x):  # noqa: ANN001, ANN202
            b, t, _ = x.shape
            q, k, v_ = (
                w(x).view(b, t, -1, h // nh).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
            )
            o = F.scaled_dot_product_attention(q, k, v_, is_causal=True)
            return self.wo(o.transpose(1, 2).reshape(b, t, -1))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w1, self.w2 = nn.Linear(h, 4 * h, bias=False), nn.Linear(4 * h, h, bias=False)

        def forward(self, x):  # noqa: ANN001, ANN202
            return self.w2(F.gelu(self.w1(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.n1, self.attn, self.n2, self.mlp = nn.LayerNorm(h), Attn(), nn.LayerNorm(h), MLP()

        def forward(self, x):  # noqa: ANN001, ANN202
            x = x + self.attn(self.n1(x))
            return x + self.mlp(self.n2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(v, h)
            self.layers = nn.ModuleList(Block() for _ in range(SIZES["layers"]))
            self.norm, self.out = nn.LayerNorm(h), nn.Linear(h, v, bias=False)

        def forward(self, x):  # noqa: ANN001, ANN202
            x = self.emb(x)
            for layer in self.layers:
                x = layer(x)
            return self.out(self.norm(x))

    return GPT()


def _parallelize(model, world: int) -> None:  # noqa: ANN001
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    mesh = init_device_mesh("cpu", (world,))
    parallelize_module(
        model,
        mesh,
        {
            "emb": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
            "norm": SequenceParallel(),
            "out": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
        },
    )
    into = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    for block in model.layers:
        parallelize_module(
            block,
            mesh,
            {
                "n1": SequenceParallel(),
                "attn": into,
                "attn.wq": ColwiseParallel(),
                "attn.wk": ColwiseParallel(),
                "attn.wv": ColwiseParallel(),
                "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
                "n2": SequenceParallel(),
                "mlp": into,
                "mlp.w1": ColwiseParallel(),
                "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
            },
        )


def _worker(rank: int, world: int, out: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile, schedule

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = _model()
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
        _parallelize(model, world)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    v = SIZES["vocab"]
    x = torch.randint(0, v, (SIZES["batch"], SIZES["seq"]))
    y = torch.randint(0, v, (SIZES["batch"], SIZES["seq"]))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x).view(-1, v), y.view(-1)).backward()
        opt.step()

    for _ in range(3):
        step()
    times = []
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=5),
        on_trace_ready=lambda p: p.export_chrome_trace(f"{out}/rank-{rank}.json"),
    ) as prof:
        for _ in range(6):
            t = time.perf_counter_ns()
            step()
            times.append(time.perf_counter_ns() - t)
            prof.step()
    if rank == 0:
        Path(out, "measured.json").write_text(
            json.dumps({"median_ns": statistics.median(times[1:])})
        )
    if world > 1:
        dist.destroy_process_group()


def record_sp(out: Path, world: int) -> float:
    """Train the model (DTensor TP + SP over `world` gloo ranks; 1: plain) for 5 profiled steps
    into `out` (a trace per rank); returns the median wall time of those steps in ns."""
    import torch.multiprocessing as mp

    out.mkdir(parents=True, exist_ok=True)
    if world > 1:
        mp.spawn(_worker, args=(world, str(out), _free_port()), nprocs=world)
    else:
        _worker(0, 1, str(out), 0)
    return float(json.loads((out / "measured.json").read_text())["median_ns"])
