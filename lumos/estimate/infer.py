"""Infer a job's base configuration (model shape, batch, parallel degrees) from its trace.

Every field comes with the evidence it was read from and a confidence in [0, 1]; a field the
trace says nothing about keeps a default at confidence 0. The rules use the trace format only (no
knowledge of a particular model; the `lumos_groundtruth` metadata of our own trainer is never
read): layer annotations and module names, the weight GEMMs' dimensions, the attention op's
query shape, activation-sized all-reduces, p2p groups and micro-batch annotations. Each field's
rule: docs/estimate-base.md, "Module notes".
"""

from __future__ import annotations

import json
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import lumos_sql
from lumos.estimate.config import KEYS, ConfigError, ModelConfig
from lumos.estimate.score_gemm import score_shape
from lumos_sql.taxonomy import CommPart, comm_part, is_megatron, is_megatron_sp
from warehouse.catalog import connect as catalog_connect
from warehouse.catalog import no_trace_message

__all__ = ["Evidence", "Inference", "infer_base", "JobNotFound"]


# Without these the base's shapes are defaults (hidden 1, one layer) and every estimate from it is
# meaningless: `lumos estimate` refuses unless they are given with --base.
REQUIRED = ("layers", "hidden", "seq", "micro_batch")

# How far each rule's evidence is trusted (`Evidence.confidence`), named once. A field the trace
# says nothing about keeps its default at confidence 0; a value given by the user has 1.
CONFIDENCE: dict[str, float] = {
    # what the trace states outright
    "process_group": 0.95,  # tp / pp / dp: a process group described as that parallelism
    "annotation": 0.95,  # layers, micro-batches: the trainer's own annotations
    "device_properties": 0.95,  # device memory: deviceProperties' totalGlobalMem
    # read from operator shapes
    "linear_dims": 0.9,  # hidden: the most common K/N of aten::linear GEMMs
    "matmul_dims": 0.7,  # hidden: the same over 2-D matmul/mm/addmm (no aten::linear)
    "gemm_dtype": 0.8,  # dtype_bytes: the GEMMs' input type
    "attention_shape": 0.85,  # seq, micro_batch, heads: the attention op's query shape
    "activation_shape": 0.3,  # seq, micro_batch: a GEMM activation read as [b, s, h]
    "megatron_layout": 0.6,  # seq, micro_batch: a Megatron GEMM activation read as [s, b, h]
    "activation_group": 0.9,  # tp: group size of activation-sized all-reduces
    "width_agrees": 0.85,  # tp from the attention width, the all-reduces agreeing
    "width_disagrees": 0.6,  # tp from the attention width, the all-reduces not agreeing
    "head_dim_guess": 0.1,  # heads: hidden / 64 without an attention op
    "stated_head_dim": 0.85,  # head_dim: the query's head size, heads x it not hidden
    "accumulated_grads": 0.8,  # tied_embeddings: gradient accumulations of [vocab, hidden]
    "kv_projection": 0.8,  # kv_heads: K/V projections narrower than the queries
    "no_kv_projection": 0.6,  # kv_heads: none narrower, multi-head attention
    "qkv_fused": 0.7,  # fused_qkv: one QKV projection per attention call
    "qkv_separate": 0.6,  # fused_qkv: no such projection
    "up_down_pair": 0.85,  # ffn: an up and a down GEMM of the same width
    "gate_count": 0.7,  # gated_mlp: up GEMMs per down GEMM
    "autocast_linears": 0.8,  # autocast: linears on fp32 weights around 2-byte ones
    "norm_ops": 0.6,  # unfused_norm: fused norm ops, or rsqrt without them
    # counted from calls
    "embedding_count": 0.6,  # num_micro_batches: word-embedding lookups per step
    "loss_count": 0.5,  # num_micro_batches: loss ops per step
    "layer_sets": 0.9,  # pp: distinct layer sets across ranks
    "attention_count": 0.7,  # layers: attention calls per step and micro-batch
    "down_gemm_count": 0.5,  # layers: down-projection GEMMs per step and micro-batch
    "per_stage_factor": 0.8,  # layers: a per-stage count times pp (a factor, not a confidence)
    "p2p_group": 0.7,  # pp: the group size of send/recv
    "p2p_guess": 0.4,  # pp: send/recv without a group, world / tp
    "no_p2p": 0.8,  # pp = 1: no send/recv, one layer set, and every rank (or one) ingested
    "no_p2p_partial": 0.5,  # pp = 1: the same with some ranks missing
    "grads_agree": 0.85,  # dp: world / (pp x tp), gradient collectives agreeing
    "grads_disagree": 0.5,  # dp: the same, not agreeing
    "schedule_irrelevant": 0.5,  # pp_schedule without a pipeline
    "gpipe_marks": 0.9,  # pp_schedule: the GPipe schedule's own annotations
    "interleaving": 0.8,  # pp_schedule: backward before the last forward, or more micro-batches
    "interleaving_weak": 0.4,  # pp_schedule: no more micro-batches than stages, not interleaved
    "embedding_rows": 0.6,  # vocab: the largest embedding table's rows
    "megatron_vocab_rows": 0.8,  # vocab: Megatron's embedding rows per rank x tp
    "megatron_vocab_split": 0.9,  # vocab_parallel: Megatron's vocabulary-parallel cross-entropy
    "megatron_sp": 0.9,  # sequence_parallel: Megatron's sequence-parallel scatters and gathers
    "replayed_forward": 0.8,  # recompute: forward calls replayed inside the backward
    "recompute_marks": 0.6,  # recompute: checkpoint markers, or attention forwards per layer
    "fused_attention": 0.8,  # flash_attention: a fused attention kernel
    "fsdp": 0.5,  # zero_stage 3: FSDP annotations or per-layer all-gathers
    "zero1": 0.4,  # zero_stage 1: gradient reduce-scatter and parameter all-gather
    "activation_gathers": 0.7,  # sequence_parallel: activation-sized gathers/scatters with TP
    "gathers_with_tp": 0.4,  # sequence_parallel: any gathers/scatters with TP
    "not_a_transformer": 0.2,  # the cap on model-shape fields without an attention op
}
C = CONFIDENCE


class JobNotFound(LookupError):
    """The warehouse holds no events for the job."""


def known_jobs(con) -> list[str]:  # noqa: ANN001
    """The jobs the catalog on `con` holds a readable trace of."""
    return [r[0] for r in con.execute(lumos_sql.load("estimate/known_jobs")).fetchall()]


def job_not_found(con, job: str) -> JobNotFound:  # noqa: ANN001
    """The error for a job the catalog on `con` does not hold, naming the jobs it does."""
    return JobNotFound(no_trace_message(con, job, known_jobs(con)))


@dataclass(frozen=True)
class Evidence:
    value: Any
    source: str  # 'trace' | 'given' | 'default'
    confidence: float
    evidence: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "source": self.source,
            "confidence": round(self.confidence, 2),
            "evidence": self.evidence,
        }


@dataclass
class Inference:
    job: str
    config: ModelConfig
    fields: dict[str, Evidence]
    warnings: list[str] = field(default_factory=list)
    # the CPU cores of the host that recorded the trace, where its recorder wrote them (0: not)
    host_cores: int = 0

    def unread(self, keys: tuple[str, ...] = REQUIRED) -> dict[str, str]:
        """Of `keys`, those the trace did not tell (left at their default), with the reason."""
        return {k: self.fields[k].evidence for k in keys if self.fields[k].source == "default"}

    @property
    def transformer(self) -> bool:
        """Whether the trace looked like a transformer (an attention op with shapes was found)."""
        return self.fields["heads"].source != "default" and self.fields["heads"].confidence > 0.5

    def to_dict(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "transformer": self.transformer,
            "config": self.config.to_dict(),
            "fields": {k: v.to_dict() for k, v in self.fields.items()},
            "warnings": list(self.warnings),
        }


# --- reading the warehouse ------------------------------------------------------------------


def _rows(con, name: str, **params: Any) -> list[dict[str, Any]]:
    cur = con.execute(lumos_sql.load(f"estimate/{name}"), params)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def _dims(text: str | None) -> list[Any]:
    if not text:
        return []
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _shape(x: Any) -> tuple[int, ...] | None:
    if isinstance(x, list) and x and all(isinstance(v, int) and v > 0 for v in x):
        return tuple(x)
    return None


# --- GEMMs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Gemm:
    rank: int
    name: str
    k: int
    n: int
    tokens: int
    lead: tuple[int, ...]  # leading dims of the activation (e.g. (b, s))
    count: int
    dtype: str


def _parse_gemms(rows: list[dict[str, Any]]) -> tuple[list[Gemm], str]:
    """Weight GEMMs (activation × 2-D weight) from the most specific family a rank has."""
    by_rank: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_rank[int(r["rank"])].append(r)
    out: list[Gemm] = []
    families: set[str] = set()
    for rank, rs in by_rank.items():
        parsed = [g for g in (_weight_gemm(rank, r) for r in rs) if g is not None]
        calls = Counter()
        for g in parsed:
            calls[g.name] += g.count
        inner = calls["aten::addmm"] + calls["aten::mm"]
        # aten::linear nests matmul/addmm/mm and only runs forward: use the outermost family,
        # unless it holds only a few of the weight multiplies (GPT-2's Conv1D layers call addmm
        # directly; only its LM head is a linear)
        if calls["aten::linear"] and 2 * calls["aten::linear"] >= inner:
            family = ("aten::linear",)
        elif calls["aten::matmul"] and 2 * calls["aten::matmul"] >= inner:
            family = ("aten::matmul",)
        else:
            family = ("aten::addmm", "aten::mm")
        families.update(family)
        out += [g for g in parsed if g.name in family]
    return out, "/".join(sorted(families))


def _weight_gemm(rank: int, r: dict[str, Any]) -> Gemm | None:
    """One gemms.sql row as an activation × 2-D weight multiply, else None."""
    d = _dims(r["input_dims"])
    types = _dims(r["input_types"])
    if r["name"] == "aten::linear" and len(d) >= 2:
        a, w = _shape(d[0]), _shape(d[1])
        if not a or not w or len(w) != 2 or a[-1] != w[1]:
            return None
        k, n, dtype = w[1], w[0], types[0] if types else ""
    elif r["name"] in ("aten::matmul", "aten::mm") and len(d) >= 2:
        a, w = _shape(d[0]), _shape(d[1])
        if not a or not w or len(w) != 2 or a[-1] != w[0]:
            return None
        k, n, dtype = w[0], w[1], types[0] if types else ""
    elif r["name"] == "aten::addmm" and len(d) >= 3:
        a, w = _shape(d[1]), _shape(d[2])
        if not a or not w or len(w) != 2 or a[-1] != w[0]:
            return None
        k, n, dtype = w[0], w[1], types[1] if len(types) > 1 else ""
    else:
        return None
    return Gemm(rank, r["name"], k, n, math.prod(a[:-1]), a[:-1], int(r["n"]), str(dtype))


# --- attention --------------------------------------------------------------------------------

# Query layout of the forward attention ops, by name (first match wins).
_LAYOUTS = (
    ("scaled_dot_product", "bhsd"),
    ("_efficient_attention_forward", "bshd"),
    ("_flash_attention_forward", "bshd"),
    ("flash_attn", "bshd"),
    ("fusedattn", "sbhd"),
)
# Attention kernels that never materialise the score matrix.
_FUSED_ATTENTION = re.compile(r"flash_att|efficient_attention|cudnn_attention|fusedattn", re.I)
# Prefer the outermost op of a nest (SDPA wraps _scaled_dot_product_flash_attention wraps
# _flash_attention_forward): each layer then counts once.
_ATTN_PRIORITY = (
    "aten::scaled_dot_product_attention",
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_flash_attention_forward",
    "aten::_efficient_attention_forward",
)


@dataclass(frozen=True)
class Attention:
    name: str
    b: int
    s: int
    local_heads: int
    head_dim: int
    count_by_rank: dict[int, int]
    how: str
    # forward calls that ran inside the backward (activation checkpointing's replay)
    recompute_by_rank: dict[int, int] = field(default_factory=dict)


def _recompute(att: Attention | None, gemm_rows: list[dict[str, Any]]) -> tuple | None:
    """(recompute, confidence, evidence) when the backward replays forward attention calls
    (activation checkpointing): `full` when the layers' linears are replayed too, `selective`
    when only the attention core is (Megatron's selective recomputation); else None."""
    if att is None:
        return None
    rk = min(att.count_by_rank)  # an Attention counts at least one call
    fwd = att.count_by_rank[rk]
    again = att.recompute_by_rank.get(rk, 0)
    if fwd == 0 or again < 0.5 * fwd:
        return None
    lin_fwd = sum(int(r["n"]) for r in gemm_rows if _is_layer_linear(r, rk))
    lin_again = sum(int(r.get("n_recompute") or 0) for r in gemm_rows if _is_layer_linear(r, rk))
    kind = "full" if lin_fwd and lin_again >= 0.5 * lin_fwd else "selective"
    return (
        kind,
        C["replayed_forward"],
        f"{again} of {fwd} {att.name} forward calls replayed inside the backward on rank {rk}"
        + (f", and {lin_again} of {lin_fwd} linears" if kind == "full" else ", no linear"),
    )


def _is_layer_linear(r: dict[str, Any], rank: int) -> bool:
    return int(r["rank"]) == rank and r["name"] in ("aten::linear", "aten::matmul")


def _attention_calls(rows: list[dict[str, Any]]) -> tuple[str, dict[int, int], dict[int, int]]:
    """The attention op's name (by priority, else the most called) and its calls per rank, all
    and replayed inside the backward: the trace records them with or without shapes."""
    totals = Counter()
    for r in rows:
        totals[r["name"]] += int(r["n"])
    name = next((n for n in _ATTN_PRIORITY if n in totals), None) or totals.most_common(1)[0][0]
    counts: dict[int, int] = defaultdict(int)
    again: dict[int, int] = defaultdict(int)
    for r in rows:
        if r["name"] == name:
            counts[int(r["rank"])] += int(r["n"])
            again[int(r["rank"])] += int(r.get("n_recompute") or 0)
    return name, dict(counts), dict(again)


def _attention(rows: list[dict[str, Any]], tokens: int | None) -> Attention | None:
    if not rows:
        return None
    name, counts, again = _attention_calls(rows)
    shapes = Counter()
    for r in rows:
        if r["name"] != name:
            continue
        q = _shape(_dims(r["input_dims"])[0]) if _dims(r["input_dims"]) else None
        if q and len(q) == 4:
            shapes[q] += int(r["n"])
    if not shapes:
        return None
    q = shapes.most_common(1)[0][0]
    layout = next((lay for key, lay in _LAYOUTS if key in name.lower()), "bhsd")
    d = q[3]
    pos = {c: i for i, c in enumerate(layout[:3])}
    b, h, s = q[pos["b"]], q[pos["h"]], q[pos["s"]]
    how = f"{name} query {list(q)} read as [{','.join(layout)}]"
    if tokens and b * s != tokens:
        # The name-based layout does not match the GEMM token count: find the dim that is heads.
        for hi in range(3):
            rest = [q[i] for i in range(3) if i != hi]
            if rest[0] * rest[1] == tokens:
                h, b, s = q[hi], min(rest), max(rest)
                how = f"{name} query {list(q)}: heads at dim {hi} (other dims give {tokens} tokens)"
                break
    return Attention(name, b, s, h, d, counts, how, again)


def _score_attention(rows: list[dict[str, Any]], tokens: int | None) -> Attention | None:
    """Attention written out as GEMMs (`score_gemm`): the scores' batch dims are `b × heads`,
    `tokens / s` of them the micro-batch. None without such a GEMM or without the token count
    to split its batch."""
    shapes: Counter = Counter()
    counts: dict[tuple, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for r in rows:
        score = score_shape(r["name"], r["input_dims"]) if int(r["n"]) else None
        if score is None:
            continue
        key = (r["name"], *score)
        shapes[key] += int(r["n"])
        counts[key][int(r["rank"])] += int(r["n"])
    if not shapes or not tokens:
        return None
    key = shapes.most_common(1)[0][0]
    name, batch, s, hd = key
    n = math.prod(batch)
    if not _divides(tokens, s) or not _divides(n, tokens // s):
        return None
    b = tokens // s
    how = (
        f"{name} scores [{', '.join(map(str, (*batch, s, hd)))}] × [.., {hd}, {s}]: "
        f"micro-batch {b} ({tokens} tokens / seq {s}) × {n // b} heads"
    )
    return Attention(name, b, s, n // b, hd, dict(counts[key]), how)


def _kv_heads(
    f: _Fields, att: Attention | None, gemms: list[Gemm], hidden: int | None, tp: int
) -> int:
    """Set `kv_heads` from the key and value projections; return one rank's K (= V) width.

    Grouped-query attention projects hidden -> kv_heads x head_dim for K and for V, narrower than
    Q: two such GEMMs per attention call (LLaMA, Mistral, Qwen in HuggingFace), or one fused
    QKV GEMM hidden -> (heads + 2 kv_heads) x head_dim per call (Megatron). The attention op's
    own key tensor does not tell: most implementations repeat K and V to every query head
    before it."""
    if not (att and hidden and gemms):
        if att:
            f.default("kv_heads", att.local_heads * tp, "no GEMM shapes: multi-head attention")
        return att.local_heads * att.head_dim if att else 0
    width, d = att.local_heads * att.head_dim, att.head_dim
    rk = min(att.count_by_rank)
    # forward calls, as the GEMM counts: replays inside the backward are counted apart in both
    calls = att.count_by_rank[rk]
    out = Counter()
    for g in gemms:
        if g.rank == rk and g.k == hidden:
            out[g.n] += g.count
    # a K/V width is read from a GEMM of its own, or from a fused QKV one (width + 2 K/V) when
    # the model has neither a Q projection of its own (hidden -> width: at most the output
    # projection's calls there, which is hidden -> hidden without TP) nor a multi-head fused
    # one (3 x width): else an MLP's up projection of width + 2w reads as a fused QKV
    fused = set()
    if out[width] <= 1.25 * calls and not _near(out[3 * width], calls):
        fused = {(n - width) // 2 for n in out if n > width and (n - width) % 2 == 0}
    for w in sorted(set(out) | fused):
        if w <= 0 or w >= width or w % d or (width // d) % (w // d):
            continue
        if out[w] and _near(out[w], 2 * calls):
            how = f"K and V projections {hidden}→{w} ({out[w]} calls, 2 per attention call)"
        elif w in fused and out[width + 2 * w] and _near(out[width + 2 * w], calls):
            how = f"fused QKV projection {hidden}→{width + 2 * w} ({out[width + 2 * w]} calls)"
        else:
            continue
        f.set(
            "kv_heads",
            w // d * tp,
            C["kv_projection"],
            f"{how}: {w // d} key/value heads per rank × tp {tp}",
        )
        return w
    f.set(
        "kv_heads",
        att.local_heads * tp,
        C["no_kv_projection"],
        "no narrower K/V projection: multi-head attention",
    )
    return width


def _fused_qkv(
    f: _Fields, att: Attention | None, gemms: list[Gemm], hidden: int | None, kv_width: int
) -> None:
    """Set `fused_qkv`: one GEMM hidden -> width + 2 K/V widths per attention call (GPT-NeoX's
    query_key_value, Megatron's QKV), else separate Q, K and V projections."""
    if not (att and hidden and gemms):
        f.default("fused_qkv", False, "no attention op or GEMM shapes")
        return
    rk = min(att.count_by_rank)
    calls = att.count_by_rank[rk]
    width = att.local_heads * att.head_dim
    fused = width + 2 * kv_width
    n = sum(g.count for g in gemms if g.rank == rk and g.k == hidden and g.n == fused)
    if calls and _near(n, calls):
        f.set(
            "fused_qkv",
            True,
            C["qkv_fused"],
            f"QKV projection {hidden}→{fused}, {n} calls (one each)",
        )
    else:
        f.set(
            "fused_qkv",
            False,
            C["qkv_separate"],
            f"no {hidden}→{fused} projection per attention call",
        )


def _autocast(f: _Fields, con) -> None:  # noqa: ANN001
    """Set `autocast` from autocast's signature in the forward: a linear called on fp32 weights
    around the linear that runs on their 2-byte copies (estimate/calls marks the outer one)."""
    rows = con.execute(
        "SELECT input_types, count(*) FROM x_calls WHERE is_outer AND NOT in_bwd"
        " AND name = 'aten::linear' GROUP BY input_types"
    ).fetchall()
    fp32 = sum(int(n) for types, n in rows if _dims(types)[1:2] == ["float"])
    low = (f.get("dtype_bytes") or 4) < 4
    if low and fp32:
        f.set(
            "autocast",
            True,
            C["autocast_linears"],
            f"{fp32} forward linears on fp32 weights around their {f.get('dtype_bytes')}-byte "
            "copies: torch.autocast over fp32 weights",
        )
    else:
        f.default("autocast", False, "no linear on fp32 weights around a low-precision one")


# Norm operators that keep only their input (and statistics) for the backward.
_FUSED_NORMS = (
    "aten::layer_norm",
    "aten::native_layer_norm",
    "aten::rms_norm",
    "aten::_fused_rms_norm",
    "aten::group_norm",
)


def _norms(f: _Fields, con, job: str) -> None:  # noqa: ANN001
    """Set `unfused_norm`: a norm written as elementwise ops (Hugging Face's RMSNorm: pow, mean,
    rsqrt, mul) shows at least one `aten::rsqrt` per layer and forward, and no fused norm op."""
    rows = dict(
        con.execute(
            "SELECT name, count(*) FROM job_events WHERE job = $job AND cat = 'cpu_op'"
            " AND name IN ('aten::rsqrt', "
            + ", ".join(f"'{n}'" for n in _FUSED_NORMS)
            + ") GROUP BY name",
            {"job": job},
        ).fetchall()
    )
    fused = sum(int(rows.get(n, 0)) for n in _FUSED_NORMS)
    rsqrt = int(rows.get("aten::rsqrt", 0))
    passes = int(f.get("layers") or 1) * int(f.get("num_micro_batches") or 1)
    if fused:
        f.set("unfused_norm", False, C["norm_ops"], f"{fused} fused norm operator calls")
    elif rsqrt >= passes:
        f.set(
            "unfused_norm",
            True,
            C["norm_ops"],
            f"{rsqrt} aten::rsqrt calls, no fused norm operator",
        )
    else:
        f.default("unfused_norm", False, "no norm operator recognised")


def _near(n: float, k: float) -> bool:
    """A GEMM's call count within a quarter of the count one per attention call implies."""
    return abs(n - k) <= 0.25 * k


# A step whose GPUs are busy this share of it has GPU work that shape changes re-time.
GPU_BOUND_SHARE = 0.2


def _gpu_bound(rows: list[dict[str, Any]]) -> str | None:
    """A note when the traced steps' GPU work is a large share of them (median over the ranks'
    steps): a single-GPU base is estimated from its step's execution graph, kernels included;
    the CPU-operator template (a multi-rank base's other configurations) holds launches and
    waits only."""
    shares = [(r["busy_ns"] / r["step_ns"], r["sync_ns"] / r["step_ns"]) for r in rows]
    if not shares:
        return None
    busy = statistics.median(b for b, _ in shares)
    sync = statistics.median(y for _, y in shares)
    if busy < GPU_BOUND_SHARE:
        return None
    return (
        f"the GPUs are busy {100 * busy:.0f}% of the traced step (median over ranks and steps) "
        f"and the CPU waits {100 * sync:.0f}% of it in synchronising calls: a single-GPU base "
        "is estimated from its step's execution graph, its kernels re-timed for every change "
        "(docs/estimate-gpu.md); a multi-rank base from its first rank's step graph for its own "
        "configuration and speed-ups, and otherwise from the CPU operators, whose durations "
        "here are kernel launches and waits for the GPU: its shape changes do not follow the "
        "GPU's work"
    )


# --- annotations ------------------------------------------------------------------------------

_LAYER_PATTERNS = (
    re.compile(r"^(?P<p>layer)[_ .-]?(?P<i>\d+)$", re.I),
    re.compile(
        r"(?:^|[.\s])(?P<p>layers|h|blocks|layer|block|decoder\.layers)\.(?P<i>\d+)(?:$|\.)"
    ),
    re.compile(r"^nn\.Module: (?P<p>\w*(?:Layer|Block))_(?P<i>\d+)$"),
)
_MB_PATTERNS = (
    re.compile(r"^(?:forward|fwd)[_ -]?(?:mb|micro_?batch)[_ -]?(?P<m>\d+)$", re.I),
    re.compile(r"^Forward (?P<m>\d+)$"),
)
_BWD_MB = re.compile(r"^(?:backward|bwd)[_ -]?(?:mb|micro_?batch)[_ -]?(?P<m>\d+)$", re.I)


def _layer_sets(names: list[dict[str, Any]]) -> tuple[dict[int, set[int]], str]:
    """rank -> layer indices, from the pattern family with the most distinct indices."""
    best: tuple[int, dict[int, set[int]], str] = (0, {}, "")
    for pat in _LAYER_PATTERNS:
        per_prefix: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
        for r in names:
            m = pat.search(str(r["name"]))
            if m and "norm" not in m.group("p").lower():
                per_prefix[m.group("p")][int(r["rank"])].add(int(m.group("i")))
        for prefix, sets in per_prefix.items():
            distinct = len(set().union(*sets.values()))
            if distinct > best[0]:
                best = (distinct, dict(sets), f"annotations {prefix!r}<i> ({pat.pattern})")
    return best[1], best[2]


def _steps(names: list[dict[str, Any]]) -> dict[int, list[int]]:
    """rank -> start times of its ProfilerStep spans (first occurrence per step name)."""
    out: dict[int, set[int]] = defaultdict(set)
    for r in names:
        if str(r["name"]).startswith("ProfilerStep#"):
            out[int(r["rank"])].add(int(r["first_ns"]))
    return {k: sorted(v) for k, v in out.items()}


# --- the inference ----------------------------------------------------------------------------


class _Fields:
    def __init__(self) -> None:
        self.values: dict[str, Evidence] = {}

    def set(self, key: str, value: Any, confidence: float, evidence: str) -> None:
        self.values[key] = Evidence(value, "trace", confidence, evidence)

    def default(self, key: str, value: Any, why: str) -> None:
        self.values[key] = Evidence(value, "default", 0.0, why)

    def get(self, key: str) -> Any:
        return self.values[key].value if key in self.values else None


def _most_common_dim(gemms: list[Gemm]) -> tuple[int, int, int]:
    c = Counter()
    for g in gemms:
        c[g.k] += g.count
        c[g.n] += g.count
    (dim, n), total = c.most_common(1)[0], sum(c.values())
    return dim, n, total


def _dtype_bytes(dtype: str) -> int | None:
    t = dtype.lower()
    if "half" in t or "bfloat16" in t or t in ("fp16", "bf16"):
        return 2
    if t == "float" or t == "float32":
        return 4
    if t == "double":
        return 8
    if "float8" in t:
        return 1
    return None


def _divides(a: int, b: int) -> bool:
    return b > 0 and a % b == 0


def infer_base(wh_or_con: Any, job: str, overrides: Mapping[str, Any] | None = None) -> Inference:
    """Infer `job`'s configuration from the warehouse (a `lumos.api.Warehouse` or an open DuckDB
    connection on its catalog); `overrides` (typed, see `parse_overrides`) win as 'given'."""
    import duckdb

    con = wh_or_con
    own = False
    if not isinstance(wh_or_con, duckdb.DuckDBPyConnection):
        con = catalog_connect(str(wh_or_con.catalog))
        own = True
    try:
        return _infer(con, job, dict(overrides or {}))
    finally:
        if own:
            con.close()


@dataclass
class _Trace:
    """What the rules read: the job's rows, and what earlier rules derived from them."""

    con: Any
    job: str
    meta: list[dict[str, Any]]
    names: list[dict[str, Any]]
    gemm_rows: list[dict[str, Any]]
    attn_rows: list[dict[str, Any]]
    coll_rows: list[dict[str, Any]]
    ranks: list[int]
    steps: dict[int, list[int]]
    n_steps: dict[int, int]
    warnings: list[str]
    world: int = 1
    world_how: str = ""
    gemms_all: list[dict[str, Any]] = field(default_factory=list)  # weight GEMMs' rows
    gemms: list[Gemm] = field(default_factory=list)
    hidden: int | None = None
    tokens: int | None = None
    att: Attention | None = None
    tp_shape: int | None = None  # the TP degree the attention width implies
    kinds: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # collectives by kind
    act_ar: list[dict[str, Any]] = field(default_factory=list)  # activation-sized all-reduces
    pg_descs: list[dict[str, Any]] = field(default_factory=list)
    tp: int = 1
    kv_width: int = 0
    n_mb: int = 1
    layer_sets: dict[int, set[int]] = field(default_factory=dict)
    local: dict[int, int] = field(default_factory=dict)  # layers per rank
    pp_evidence: tuple | None = None
    pp: int = 1
    vocab: int | None = None
    # Megatron's own autograd functions in the trace: sequence-first activations, split tables
    megatron: list[str] = field(default_factory=list)

    def pg_size(self, word: str) -> int | None:
        """The largest process group described as `word` parallelism alone ('tensor', ...)."""
        sizes = [
            int(pg.get("pg_size") or len(pg.get("ranks") or []))
            for pg in self.pg_descs
            if _describes(str(pg.get("pg_desc", "")), word)
        ]
        return max(sizes) if sizes else None


# Words of a process group's description that name a kind of parallelism: a group named for one
# of them alone is that degree's; a group named for several (Megatron's
# `TENSOR_AND_DATA_PARALLEL_GROUP`, `EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP`) is none's.
_PARALLEL_WORDS = frozenset(
    {"tensor", "pipeline", "data", "expert", "context", "embedding", "position", "and"}
)


def _describes(desc: str, word: str) -> bool:
    """Whether a process group described as `desc` is the group of `word` parallelism alone."""
    words = set(re.findall(r"[a-z]+", desc.lower()))
    return word in words and not (words & _PARALLEL_WORDS) - {word}


def _read(con, job: str, given: dict[str, Any]) -> _Trace:  # noqa: ANN001
    from warehouse.catalog import job_events_view

    for key in given:
        if key not in KEYS:
            raise ConfigError(f"--base: unknown key {key!r}")
    # meta, names, calls, collectives and order read the job's own files (`job_events`)
    job_events_view(con, job)
    meta = _rows(con, "meta", job=job)
    if not meta:
        raise job_not_found(con, job)
    names = _rows(con, "names", job=job)
    con.execute(lumos_sql.load("estimate/calls"), {"job": job})
    gemm_rows = _rows(con, "gemms")
    attn_rows = _rows(con, "attention")
    coll_rows = _rows(con, "collectives", job=job)
    ranks = sorted(int(r["rank"]) for r in meta)
    steps = _steps(names)
    n_steps = {r: max(1, len(steps.get(r, []))) for r in ranks}
    t = _Trace(con, job, meta, names, gemm_rows, attn_rows, coll_rows, ranks, steps, n_steps, [])
    t.megatron = sorted({str(r["name"]) for r in names if is_megatron(str(r["name"]))})
    worlds = [int(r["world_size"]) for r in meta if r["world_size"] is not None]
    t.world = max(worlds) if worlds else len(ranks)
    t.world_how = "distributedInfo.world_size" if worlds else f"{len(ranks)} rank file(s) ingested"
    if len(ranks) < t.world:
        t.warnings.append(
            f"only {len(ranks)} of {t.world} ranks ingested: per-stage counts may miss"
        )
    return t


def _infer(con, job: str, given: dict[str, Any]) -> Inference:  # noqa: ANN001
    """Each field by its rule, in an order where a rule's inputs are known before it runs."""
    t = _read(con, job, given)
    f = _Fields()
    _hidden_and_dtype(t, f)
    _seq_and_micro_batch(t, f)
    _collectives(t)
    _tp(t, f)
    _heads(t, f)
    t.kv_width = _kv_heads(f, t.att, t.gemms, t.hidden, t.tp)
    _fused_qkv(f, t.att, t.gemms, t.hidden, t.kv_width)
    _autocast(f, con)
    _ffn(t, f)
    marks = _micro_batch_marks(t)
    _num_micro_batches(t, f, marks[0])
    _layers(t, f)
    _pp(t, f)
    _dp(t, f)
    _pp_schedule(t, f, marks)
    _vocab(t, f)
    _head_dim(t, f)
    _tied_embeddings(t, f)
    _norms(f, con, job)
    _recompute_field(t, f)
    _flash_attention(t, f)
    _sharding(t, f)
    dev = [int(r["device_memory"]) for r in t.meta if r["device_memory"]]
    if dev:
        name = next((r["device_name"] for r in t.meta if r["device_name"]), "device")
        f.set(
            "device_memory",
            min(dev),
            C["device_properties"],
            f"deviceProperties totalGlobalMem of {name}",
        )
    if not t.att:
        _weak_shapes(t, f)
    gpu = _gpu_bound(_rows(con, "gpu_busy", job=job))
    if gpu:
        t.warnings.append(gpu)
    return _result(t, f, given)


def _vocab(t: _Trace, f: _Fields) -> None:
    """vocab: the largest embedding table's rows, × tp where Megatron splits it by vocabulary
    (its vocabulary-parallel cross-entropy in the trace); vocab_parallel: that split."""
    split = [n for n in t.megatron if "VocabParallel" in n]
    if t.vocab and split and t.tp > 1:
        how = f"{t.vocab} embedding rows per rank × tp {t.tp}"
        f.set("vocab", t.vocab * t.tp, C["megatron_vocab_rows"], how)
        why = f"Megatron splits the vocabulary ({split[0]})"
        f.set("vocab_parallel", True, C["megatron_vocab_split"], why)
        return
    if t.vocab:
        how = f"largest embedding table has {t.vocab} rows (per rank)"
        f.set("vocab", t.vocab, C["embedding_rows"], how)
    # A replicated and a vocabulary-split table look alike on one rank (both `vocab` rows here)
    f.default(
        "vocab_parallel", False, "embedding and LM head replicated over TP ranks (Megatron splits)"
    )


def _hidden_and_dtype(t: _Trace, f: _Fields) -> None:
    """hidden: the most common K/N dimension of the weight GEMMs; the tokens of a GEMM whose K is
    hidden; dtype_bytes: the GEMMs' most common input type."""
    t.gemms_all = [r for r in t.gemm_rows if r["name"] != "aten::embedding"]
    t.gemms, family = _parse_gemms(t.gemms_all)
    if not t.gemms:
        f.default("hidden", 1, "no GEMM with shapes (record_shapes off, or not a transformer)")
        return
    t.hidden, hits, total = _most_common_dim(t.gemms)
    f.set(
        "hidden",
        t.hidden,
        C["linear_dims"] if family == "aten::linear" else C["matmul_dims"],
        f"most common GEMM K/N dim over {family} ({hits} of {total} dims)",
    )
    tok = Counter()
    for g in t.gemms:
        if g.k == t.hidden:
            tok[g.tokens] += g.count
    t.tokens = tok.most_common(1)[0][0] if tok else None
    dt = Counter()
    for g in t.gemms:
        dt[g.dtype] += g.count
    nbytes = _dtype_bytes(dt.most_common(1)[0][0])
    if nbytes:
        f.set(
            "dtype_bytes", nbytes, C["gemm_dtype"], f"GEMM input type {dt.most_common(1)[0][0]!r}"
        )


def _seq_and_micro_batch(t: _Trace, f: _Fields) -> None:
    """seq and micro_batch from the attention op's query shape, else attention's score GEMM
    (micro_batch = GEMM tokens / seq), else from a GEMM activation read as [b, s, h] ([s, b, h]
    in a Megatron trace); the TP degree the attention width implies."""
    t.att = att = _attention(t.attn_rows, t.tokens) or _score_attention(t.gemm_rows, t.tokens)
    hidden, tokens = t.hidden, t.tokens
    if att and hidden:
        width = att.local_heads * att.head_dim
        if _divides(hidden, width):
            t.tp_shape = hidden // width
        f.set("seq", att.s, C["attention_shape"], att.how)
        mb_size = att.b
        if tokens and _divides(tokens, att.s):
            mb_size = tokens // att.s
        f.set("micro_batch", mb_size, C["attention_shape"], f"GEMM tokens {tokens} / seq {att.s}")
    elif t.gemms and tokens:
        lead = Counter()
        for g in t.gemms:
            if g.k == hidden and len(g.lead) == 2:
                lead[g.lead] += g.count
        if lead and t.megatron:
            s, b = lead.most_common(1)[0][0]
            how = f"GEMM activation [{s}, {b}, {hidden}] read as [s, b, h]"
            f.set("seq", s, C["megatron_layout"], how)
            why = f"Megatron is sequence-first ({t.megatron[0]} in the trace)"
            f.set("micro_batch", b, C["megatron_layout"], why)
        elif lead:
            b, s = lead.most_common(1)[0][0]
            how = f"GEMM activation [{b}, {s}, {hidden}] read as [b, s, h]"
            f.set("seq", s, C["activation_shape"], how)
            f.set(
                "micro_batch",
                b,
                C["activation_shape"],
                "GEMM activation read as [b, s, h] (no attention op)",
            )


def _coll_kind(r: dict[str, Any]) -> str:
    text = f"{r['name']} {r['coll_name'] or ''}".lower()
    for kind, keys in (
        ("p2p", ("send", "recv")),
        ("all_reduce", ("allreduce", "all_reduce")),
        ("reduce_scatter", ("reduce_scatter", "reducescatter")),
        ("all_gather", ("allgather", "all_gather")),
        ("all_to_all", ("alltoall", "all_to_all")),
    ):
        if any(k in text for k in keys):
            return kind
    return "other"


def _nelems(r: dict[str, Any]) -> int | None:
    if r["in_nelems"] is not None:
        return int(r["in_nelems"])
    d = _dims(r["input_dims"])
    while d and isinstance(d[0], list) and d[0] and isinstance(d[0][0], list):
        d = d[0]  # c10d ops take a list of tensors: [[[2, 16, 32]], ...]
    s = _shape(d[0]) if d else None
    return math.prod(s) if s else None


def _collectives(t: _Trace) -> None:
    """The job's collectives by kind, its activation-sized all-reduces and process groups."""
    # One source per rank so an op and its annotation or record_param_comms do not count twice.
    colls = [r for r in t.coll_rows if comm_part(str(r["name"])) is CommPart.CALL]
    if not colls:
        colls = [r for r in t.coll_rows if r["name"] == "record_param_comms"] or t.coll_rows
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in colls:
        kinds[_coll_kind(r)].append(r)
    t.kinds = kinds
    t.act_ar = [
        r
        for r in kinds.get("all_reduce", [])
        if t.hidden and t.tokens and _nelems(r) == t.tokens * t.hidden
    ]
    t.pg_descs = [pg for r in t.meta for pg in _dims(r["pg_config_json"]) if isinstance(pg, dict)]


def _tp(t: _Trace, f: _Fields) -> None:
    """tp: a tensor-parallel process group, else the group of activation-sized all-reduces, else
    hidden / the attention width."""
    tp_pg = t.pg_size("tensor")
    act_groups = [int(r["group_size"]) for r in t.act_ar if r["group_size"]]
    if tp_pg:
        f.set(
            "tp",
            tp_pg,
            C["process_group"],
            f"process group described as tensor parallel, size {tp_pg}",
        )
    elif act_groups:
        g = Counter(act_groups).most_common(1)[0][0]
        how = f"group size of activation-sized all-reduces ({t.tokens}×{t.hidden})"
        f.set("tp", g, C["activation_group"], how)
    elif t.tp_shape:
        n_act = sum(int(r["n"]) for r in t.act_ar)
        conf = C["width_agrees"] if (t.tp_shape > 1) == bool(n_act) else C["width_disagrees"]
        f.set(
            "tp",
            t.tp_shape,
            conf,
            f"hidden {t.hidden} / attention width {t.att.local_heads}×{t.att.head_dim}"
            + (
                f"; {n_act} activation-sized all-reduces" if n_act else "; no activation all-reduce"
            ),
        )
    else:
        f.default("tp", 1, "no attention shape nor tensor-parallel collective")
    t.tp = int(f.get("tp"))


def _heads(t: _Trace, f: _Fields) -> None:
    """heads: the attention op's heads per rank times tp, else a guess of head_dim 64."""
    att, hidden, tp = t.att, t.hidden, t.tp
    if att and hidden:
        heads = att.local_heads * tp
        how = f"{att.local_heads} heads per rank × tp {tp}, head_dim {att.head_dim}"
        f.set("heads", heads, C["attention_shape"], how)
    elif hidden and hidden % 64 == 0:
        f.set("heads", hidden // 64, C["head_dim_guess"], "no attention op: guessed head_dim 64")
    else:
        f.default("heads", 1, "no attention op with input shapes")


def _head_dim(t: _Trace, f: _Fields) -> None:
    """head_dim: stated where the query's head size times the heads is not the hidden size
    (Gemma, Qwen3 set it apart); else 0, hidden / heads, which follows a change of hidden."""
    att, heads = t.att, f.get("heads")
    if att and t.hidden and heads and att.head_dim * heads != t.hidden:
        how = f"query head size {att.head_dim}: {heads} heads × {att.head_dim} ≠ hidden {t.hidden}"
        f.set("head_dim", att.head_dim, C["stated_head_dim"], how)
    else:
        f.default("head_dim", 0, "heads × head size = hidden")


def _tied_embeddings(t: _Trace, f: _Fields) -> None:
    """tied_embeddings: the autograd engine accumulates one [vocab, hidden] gradient per
    lookup of the embedding table when the LM head's weight is the embedding's (the two gradients are
    summed before the one tensor takes them), two when the head has its own weight."""
    for r in _rows(t.con, "accumulate_grads", job=t.job):
        lookups, grads = int(r["lookups"] or 0), int(r["vocab_grads"] or 0)
        if not lookups or r["width"] != t.hidden or grads not in (lookups, 2 * lookups):
            continue
        tied = grads == lookups
        how = (
            f"{grads} [{r['vocab_rows']}, {r['width']}] gradient accumulations for {lookups} "
            f"lookups of that table: the LM head {'shares' if tied else 'has'} "
            f"{'the embedding' if tied else 'its own'} weight"
        )
        f.set("tied_embeddings", tied, C["accumulated_grads"], how)
        return
    f.default("tied_embeddings", False, "no [vocab, hidden] gradient accumulation to count")


def _ffn(t: _Trace, f: _Fields) -> None:
    """ffn and gated_mlp: an up GEMM hidden -> F (or -> 2F fused gate+up) and a down GEMM
    F -> hidden, F times tp; gated when there are two up GEMMs per down."""
    hidden, tp, att = t.hidden, t.tp, t.att
    if not (hidden and t.gemms):
        return
    ups, downs = Counter(), Counter()
    for g in t.gemms:
        if g.k == hidden and g.n != hidden:
            ups[g.n] += g.count
        if g.n == hidden and g.k != hidden:
            downs[g.k] += g.count
    exclude = {hidden // tp}
    if att:
        width = att.local_heads * att.head_dim
        exclude |= {3 * width, t.kv_width, width + 2 * t.kv_width}
    cands = []
    for F, nd in downs.items():
        if F in exclude:
            continue
        if ups.get(F):
            cands.append((nd, F, ups[F] >= 2 * nd, False))
        elif ups.get(2 * F):
            cands.append((nd, F, True, True))
    if not cands:
        f.default("ffn", 0, "no up/down GEMM pair: 4 × hidden assumed")
        return
    nd, F, gated, fused = max(cands)
    how = (
        f"up GEMM {hidden}→{2 * F if fused else F}{' (fused gate+up)' if fused else ''}"
        f" and down GEMM {F}→{hidden} ({nd} calls), × tp {tp}"
    )
    f.set("ffn", F * tp, C["up_down_pair"], how)
    f.set(
        "gated_mlp",
        gated,
        C["gate_count"],
        "gate and up projections (2 up GEMMs per down)" if gated else "1 up GEMM per down",
    )


_Marks = tuple[dict[int, set[int]], dict[int, dict[int, int]], dict[int, dict[int, int]], int]


def _micro_batch_marks(t: _Trace) -> _Marks:
    """Per rank: the forward micro-batch indices annotated, each forward's and backward's first
    start; and how many annotations are the GPipe schedule's own (`Forward <m>`)."""
    mb_idx: dict[int, set[int]] = defaultdict(set)
    fwd_first: dict[int, dict[int, int]] = defaultdict(dict)
    bwd_first: dict[int, dict[int, int]] = defaultdict(dict)
    gpipe_marks = 0
    for r in t.names:
        name, rk = str(r["name"]), int(r["rank"])
        for pat in _MB_PATTERNS:
            m = pat.match(name)
            if m:
                mb_idx[rk].add(int(m.group("m")))
                fwd_first[rk][int(m.group("m"))] = min(
                    fwd_first[rk].get(int(m.group("m")), 1 << 62), int(r["first_ns"])
                )
                gpipe_marks += pat.pattern.startswith("^Forward")
        m = _BWD_MB.match(name) or re.match(r"^Backward (?P<m>\d+)$", name)
        if m:
            bwd_first[rk][int(m.group("m"))] = min(
                bwd_first[rk].get(int(m.group("m")), 1 << 62), int(r["first_ns"])
            )
    return mb_idx, fwd_first, bwd_first, gpipe_marks


def _num_micro_batches(t: _Trace, f: _Fields, mb_idx: dict[int, set[int]]) -> None:
    """num_micro_batches: distinct forward micro-batch annotations, else word-embedding lookups
    per step, else loss ops per step; also the vocabulary (the largest embedding table)."""
    emb_rows = [r for r in t.gemm_rows if r["name"] == "aten::embedding"]
    emb_count: dict[int, int] = {}
    if emb_rows:
        biggest = max((_shape(_dims(r["input_dims"])[0]) or (0,))[0] for r in emb_rows)
        t.vocab = biggest or None
        for r in emb_rows:
            w = _shape(_dims(r["input_dims"])[0]) or (0,)
            if w[0] == biggest:
                emb_count[int(r["rank"])] = emb_count.get(int(r["rank"]), 0) + int(r["n"])
    loss_count: dict[int, int] = defaultdict(int)
    loss_names = Counter(
        str(r["name"])
        for r in t.names
        if str(r["name"]).startswith("aten::") and "loss" in r["name"]
    )
    if loss_names:
        outer = next(
            n
            for n in ("aten::cross_entropy_loss", "aten::nll_loss_nd", "aten::nll_loss")
            if n in loss_names
        )
        for r in t.names:
            if r["name"] == outer:
                loss_count[int(r["rank"])] += int(r["n"])
    n_steps = t.n_steps
    if mb_idx:
        m = max(len(v) for v in mb_idx.values())
        f.set(
            "num_micro_batches", m, C["annotation"], f"{m} distinct forward micro-batch annotations"
        )
    elif emb_count:
        rk = min(emb_count)
        m = max(1, round(emb_count[rk] / n_steps[rk]))
        f.set(
            "num_micro_batches",
            m,
            C["embedding_count"],
            f"{emb_count[rk]} word-embedding lookups over {n_steps[rk]} step(s) on rank {rk}",
        )
    elif loss_count:
        rk = max(loss_count)
        m = max(1, round(loss_count[rk] / n_steps[rk]))
        how = f"{loss_count[rk]} loss ops / {n_steps[rk]} step(s)"
        f.set("num_micro_batches", m, C["loss_count"], how)
    else:
        f.default("num_micro_batches", 1, "no micro-batch annotation, embedding or loss op")
    t.n_mb = int(f.get("num_micro_batches"))


def _layers(t: _Trace, f: _Fields) -> None:
    """layers: distinct indices of layer annotations (summed over stages, whose distinct sets
    are pipeline evidence), else attention calls, else down-projection GEMMs per step and
    micro-batch on the first rank."""
    t.layer_sets, layer_how = _layer_sets(t.names)
    if t.layer_sets:
        layers = len(set().union(*t.layer_sets.values()))
        stages = {frozenset(v) for v in t.layer_sets.values()}
        f.set("layers", layers, C["annotation"], f"{layers} distinct indices of {layer_how}")
        if len(stages) > 1:
            how = f"{len(stages)} distinct layer sets across ranks"
            t.pp_evidence = (len(stages), C["layer_sets"], how)
        t.local = {rk: len(v) for rk, v in t.layer_sets.items()}
        return
    per_rank, what = {}, ""
    if t.attn_rows:  # with or without shapes: one forward call per layer and micro-batch
        name, per_rank, _ = _attention_calls(t.attn_rows)
        what = f"{name} calls"
    elif t.att:  # attention written out: its score GEMM, once per layer and micro-batch
        per_rank, what = t.att.count_by_rank, f"{t.att.name} attention-score calls"
    if not per_rank and t.hidden and f.get("ffn"):
        F = int(f.get("ffn")) // t.tp
        per_rank = defaultdict(int)
        for g in t.gemms:
            if g.k == F and g.n == t.hidden:
                per_rank[g.rank] += g.count
        what = f"down-projection GEMM {F}→{t.hidden} calls"
    if not per_rank:
        f.default("layers", 1, "no layer annotation, attention op or MLP GEMM pair")
        return
    n_steps, n_mb = t.n_steps, t.n_mb
    t.local = {rk: max(1, round(c / (n_steps[rk] * n_mb))) for rk, c in per_rank.items()}
    rk = min(t.local)
    f.set(
        "layers",
        t.local[rk],
        C["attention_count"] if t.attn_rows or t.att else C["down_gemm_count"],
        f"{per_rank[rk]} {what} / ({n_steps[rk]} step(s) × {n_mb} micro-batch(es)) on rank {rk}",
    )


def _pp(t: _Trace, f: _Fields) -> None:
    """pp: a pipeline process group, else distinct layer sets, else the send/recv group size,
    else send/recv presence; a per-stage layer count is then multiplied by pp."""
    p2p = t.kinds.get("p2p", [])
    pp_pg = t.pg_size("pipeline")
    if pp_pg:
        how = f"process group described as pipeline, size {pp_pg}"
        t.pp_evidence = (pp_pg, C["process_group"], how)
    elif t.pp_evidence is None and p2p:
        sizes = [int(r["group_size"]) for r in p2p if r["group_size"]]
        if sizes:
            g = Counter(sizes).most_common(1)[0][0]
            t.pp_evidence = (g, C["p2p_group"], f"group size {g} of send/recv")
        else:
            guess = max(2, t.world // t.tp)
            how = f"send/recv present, no group: world {t.world} / tp {t.tp}"
            t.pp_evidence = (guess, C["p2p_guess"], how)
    if t.pp_evidence:
        f.set("pp", *t.pp_evidence)
    else:
        whole = t.world == 1 or len(t.ranks) > 1
        conf = C["no_p2p"] if whole else C["no_p2p_partial"]
        f.values["pp"] = Evidence(1, "trace", conf, "no send/recv and one layer set")
    t.pp = pp = int(f.get("pp"))
    if (
        pp > 1
        and not t.layer_sets
        and "layers" in f.values
        and f.values["layers"].source == "trace"
    ):
        per_stage = int(f.get("layers"))
        ev = f.values["layers"]
        conf = ev.confidence * C["per_stage_factor"]
        f.set("layers", per_stage * pp, conf, ev.evidence + f" × pp {pp}")


def _dp(t: _Trace, f: _Fields) -> None:
    """dp: world size / (pp x tp), confirmed by a data-parallel process group or by gradient
    collectives (all-reduces and reduce-scatters that are not activation-sized)."""
    world, pp, tp = t.world, t.pp, t.tp
    if world % (pp * tp) != 0:
        t.warnings.append(f"world size {world} is not a multiple of pp {pp} × tp {tp}")
        f.default("dp", 1, f"world {world} not divisible by pp × tp")
        return
    dp = world // (pp * tp)
    grad_ar = [
        r
        for r in t.kinds.get("all_reduce", []) + t.kinds.get("reduce_scatter", [])
        if r not in t.act_ar
    ]
    dp_pg = t.pg_size("data")
    if dp_pg and dp_pg == dp:
        conf, how = C["process_group"], f"process group described as data parallel, size {dp_pg}"
    else:
        conf = C["grads_agree"] if (dp > 1) == bool(grad_ar) else C["grads_disagree"]
        how = f"world {world} ({t.world_how}) / (pp {pp} × tp {tp})" + (
            f"; {len(grad_ar)} gradient collective kind(s)" if grad_ar else ""
        )
    f.set("dp", dp, conf, how)


def _pp_schedule(t: _Trace, f: _Fields, marks: _Marks) -> None:
    """pp_schedule: GPipe when every forward of a step precedes its first backward on the first
    stage (or by GPipe's own annotations), else 1F1B."""
    _, fwd_first, bwd_first, gpipe_marks = marks
    pp, n_mb, ranks = t.pp, t.n_mb, t.ranks
    if pp == 1 or n_mb == 1:
        why = "no pipeline (pp=1 or one micro-batch): irrelevant"
        f.set("pp_schedule", "1f1b", C["schedule_irrelevant"], why)
        return
    if gpipe_marks:
        why = "GPipe schedule's own 'Forward <m>' annotations"
        f.set("pp_schedule", "gpipe", C["gpipe_marks"], why)
        return
    first = min(ranks)
    # 1F1B's last stage interleaves from its first micro-batch on (no warm-up forwards);
    # earlier stages look like GPipe when there are no more micro-batches than stages
    marked = [rk for rk in sorted(ranks) if fwd_first.get(rk) and bwd_first.get(rk)]
    if marked:
        inter = [rk for rk in marked if min(bwd_first[rk].values()) < max(fwd_first[rk].values())]
        interleaved = bool(inter)
        shown = inter[0] if inter else marked[-1]
        how = "first backward_mb before the last forward_mb on rank " + str(shown)
    else:
        st = t.steps.get(first, [])
        t0 = st[0] if st else -(1 << 62)
        t1 = st[1] if len(st) > 1 else 1 << 62
        o = _rows(t.con, "order", job=t.job, t0=t0, t1=t1, rank=first)
        interleaved = bool(
            o and o[0]["first_bwd_ns"] and o[0]["first_bwd_ns"] < o[0]["last_fwd_ns"]
        )
        how = f"autograd backward vs last forward attention op in step 1 of rank {first}"
    sched = "1f1b" if interleaved else "gpipe"
    conf = C["interleaving"] if n_mb > pp or interleaved else C["interleaving_weak"]
    f.set("pp_schedule", sched, conf, how + (" (interleaved)" if interleaved else ""))


def _recompute_field(t: _Trace, f: _Fields) -> None:
    """recompute: forward ops replayed inside the backward, checkpoint markers, or more forward
    layer passes than micro-batches."""
    ckpt = [r for r in t.names if "checkpoint" in str(r["name"]).lower()]
    again = _recompute(t.att, t.gemms_all)
    if again:
        f.set("recompute", *again)
    elif ckpt:
        why = f"checkpoint marker {ckpt[0]['name']!r}"
        f.set("recompute", "full", C["recompute_marks"], why)
    elif t.att and t.layer_sets and t.local:
        rk = min(t.local)
        ratio = t.att.count_by_rank.get(rk, 0) / max(1, t.local[rk] * t.n_mb * t.n_steps[rk])
        if ratio >= 1.8:
            why = f"{ratio:.1f} attention forwards per layer pass"
            f.set("recompute", "full", C["recompute_marks"], why)
        else:
            why = "one attention forward per layer and micro-batch"
            f.set("recompute", "none", C["recompute_marks"], why)
    else:
        f.default("recompute", "none", "no checkpoint marker")


def _flash_attention(t: _Trace, f: _Fields) -> None:
    """flash_attention: a fused attention kernel keeps no scores (memory's 5·a·s/h term): flash,
    memory-efficient, cuDNN or Transformer Engine's fused attention, whatever wraps it."""
    fused = sorted({str(r["name"]) for r in t.attn_rows if _FUSED_ATTENTION.search(str(r["name"]))})
    if fused:
        f.set("flash_attention", True, C["fused_attention"], f"fused attention kernel {fused[0]!r}")
    else:
        f.default("flash_attention", False, "no fused attention kernel: scores are stored")


def _sharding(t: _Trace, f: _Fields) -> None:
    """zero_stage (ZeRO / FSDP) from the parameter gathers and gradient scatters;
    sequence_parallel from activation-sized gathers and scatters with tensor parallelism."""
    hidden, tokens, tp = t.hidden, t.tokens, t.tp
    fsdp = any("fullyshardeddataparallel" in str(r["name"]).lower() for r in t.names)
    # sequence parallelism gathers and scatters the activations (a rank's tokens x hidden / tp,
    # or the whole): those are not sharded parameters
    act_sizes = {tokens * hidden, tokens * hidden // tp} if tokens and hidden else set()

    def count(kind: str, act: bool) -> int:
        return sum(int(r["n"]) for r in t.kinds.get(kind, []) if (_nelems(r) in act_sizes) == act)

    ag, rs = count("all_gather", False), count("reduce_scatter", False)
    sp = count("all_gather", True) + count("reduce_scatter", True)
    n_layers = int(f.get("layers") or 1)
    if fsdp or (ag >= n_layers and rs and not t.act_ar):
        f.set("zero_stage", 3, C["fsdp"], f"FSDP annotations or per-layer all-gathers ({ag})")
    elif rs and ag and tp == 1:
        how = f"gradient reduce-scatter ({rs}) and parameter all-gather ({ag})"
        f.set("zero_stage", 1, C["zero1"], how)
    else:
        f.default("zero_stage", 0, "no reduce-scatter/all-gather pattern of sharded training")
    sp_marks = [n for n in t.megatron if is_megatron_sp(n)]
    if tp > 1 and sp_marks:
        why = f"Megatron's sequence parallelism ({sp_marks[0]})"
        f.set("sequence_parallel", True, C["megatron_sp"], why)
    elif tp > 1 and sp:
        f.set(
            "sequence_parallel",
            True,
            C["activation_gathers"],
            f"{sp} activation-sized all-gathers/reduce-scatters ({tokens}×{hidden} or 1/{tp})"
            " with tensor parallelism",
        )
    elif tp > 1 and (rs or ag) and t.att:
        why = "reduce-scatter/all-gather with tensor parallelism"
        f.set("sequence_parallel", True, C["gathers_with_tp"], why)


def _weak_shapes(t: _Trace, f: _Fields) -> None:
    """Without an attention op the shapes are not a transformer's (DLRM, ResNet) or attention
    was not recorded: keep what was read, but say it is weak."""
    t.warnings.append(
        f"attention operator {_attention_calls(t.attn_rows)[0]} recorded without input shapes "
        "(the profiler's record_shapes was off): model-shape fields are guesses"
        if t.attn_rows
        else "no attention operator in the trace: not a transformer, or attention is "
        "not recorded; model-shape fields are guesses"
    )
    cap = C["not_a_transformer"]
    for key in ("layers", "hidden", "ffn", "heads", "seq", "micro_batch", "vocab"):
        ev = f.values.get(key)
        if ev and ev.source == "trace":
            f.values[key] = Evidence(ev.value, ev.source, min(ev.confidence, cap), ev.evidence)


def _result(t: _Trace, f: _Fields, given: dict[str, Any]) -> Inference:
    """Given values win; every key not inferred keeps ModelConfig's default; the configuration
    is validated (an inconsistent one is a warning, not an error)."""
    for key, value in given.items():
        f.values[key] = Evidence(value, "given", 1.0, "given")
    base = ModelConfig()
    values = {k: f.values[k].value for k in KEYS if k in f.values}
    cfg = base.replace(**values)
    for k in KEYS:
        if k not in f.values:
            f.default(k, getattr(base, k), "not inferred")
    try:
        cfg.validate(f"job {t.job}")
    except ConfigError as exc:
        t.warnings.append(f"inferred configuration is inconsistent: {exc}")
    cores = max((int(r["host_cores"] or 0) for r in t.meta), default=0)
    return Inference(t.job, cfg, {k: f.values[k] for k in KEYS}, t.warnings, cores)
