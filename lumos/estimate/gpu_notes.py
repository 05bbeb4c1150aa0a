"""What a GPU step graph estimate says it added: the collectives of its parallel configuration.

Kept apart from the graph modules (which load pyarrow) so the estimator can word a prediction
without importing them.
"""

from __future__ import annotations

from collections.abc import Sequence

from lumos.estimate.comm import CommModel
from lumos.estimate.config import ModelConfig

__all__ = ["gpu_collective_note"]


def gpu_collective_note(cfg: ModelConfig, comm: CommModel, asked: Sequence[str] = ()) -> str:
    """One line naming the collectives the graph edit added for `cfg` and the cost model
    (`asked`: what pricing cfg's sizes needed, `GpuModel.collective_notes`)."""
    what = []
    if cfg.pp > 1:
        what.append(
            f"pp={cfg.pp} ({cfg.pp_schedule}): one stage per GPU, each forward's "
            "activations and backward's gradients sent to the next / previous stage"
        )
    if cfg.tp > 1:
        pair = (
            "a reduce-scatter and an all-gather (sequence parallel: the layers' norms and "
            "residuals on seq/tp tokens)"
            if cfg.sequence_parallel
            else "an all-reduce"
        )
        what.append(
            f"tp={cfg.tp}: {pair} of the activations on the compute stream after each "
            "row-parallel linear's forward and column-parallel linear's backward"
        )
        if cfg.vocab_parallel:
            what.append(
                "vocabulary parallel: the embedding and LM head split by tp, the embedding's "
                "output and the head's input gradient all-reduced, the cross-entropy's three "
                "per-token all-reduces"
            )
    if cfg.dp > 1:
        sync = "reduce-scatters" if cfg.zero_stage >= 2 else "all-reduces"
        what.append(
            f"dp={cfg.dp}: the gradient {sync} on their own stream during the last "
            "micro-batch's backward, the optimizer waiting for them"
        )
        if cfg.zero_stage >= 1:
            what.append(
                f"ZeRO-{cfg.zero_stage}: the optimizer updates 1/{cfg.dp} of the parameters, "
                + (
                    "then all-gathers those no layer gathers (embedding, LM head); each "
                    "layer's parameters all-gathered before its forward and its backward "
                    "(FSDP's all-gather stream)"
                    if cfg.zero_stage >= 3
                    else "then all-gathers them"
                )
            )
    return (
        f"collectives added to the graph ({'; '.join(what)}), an all-reduce a ring: "
        "2(n-1) x alpha + 2(n-1)/n x bytes / bw, a reduce-scatter or all-gather half of it, "
        "a transfer alpha + bytes / bw; "
        + "; ".join([*comm.notes, *asked, *filter(None, [comm.node_note()])])
    )
