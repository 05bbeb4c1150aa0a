"""Group a base job's traced step into the blocks the graph transforms reassemble.

`extract_template(warehouse, job, cfg)` reads `lumos_sql/estimate/template_tasks.sql` and cuts one
representative step into blocks (``head``, ``f_pre``/``f_layer``/``f_post``,
``b_post``/``b_layer``/``b_pre``, ``opt``, ``tail``), from the trainer's annotations or, without
them, from module names and the period of the forward's op names (`_infer_labels`). Each op gets a
*role*, the shape feature its duration scales with (`lumos.estimate.retime`). The template is
cached as `<wh>/estimate_templates/job=<enc>/template.npz`, so later estimates never touch SQL.
The blocks, the evidence and the roles in full: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lumos.estimate.score_gemm import score_shape
from lumos_sql.taxonomy import is_attention, is_comm, is_grad_accumulation, is_loss, is_norm

# roles: the shape feature an operator's duration follows (see retime.FEATURES)
ROLES = (
    "const",
    "gemm_qkv",
    "gemm_out",
    "gemm_up",
    "gemm_down",
    "gemm_head",
    "attn",
    "tok_h",
    "tok_f",
    "tok_v",
    "emb",
    "param_l",
    "opt",
)
ROLE = {r: i for i, r in enumerate(ROLES)}
BLOCKS = ("head", "f_pre", "f_layer", "f_post", "b_post", "b_layer", "b_pre", "opt", "tail")
BLOCK = {b: i for i, b in enumerate(BLOCKS)}
# the blocks of a layer's forward and backward (the others are the model's ends and the loop's)
LAYER_BLOCKS = (BLOCK["f_layer"], BLOCK["b_layer"])
# which attention input a layer op works on, where the trace shows it (`_qkv_paths`): the
# queries' or the keys' and values' (grouped-query attention narrows only the latter)
PATHS = ("none", "queries", "keys_values")
PATH = {p: i for i, p in enumerate(PATHS)}
# the fewest operators a side's run after the projections has (`_qkv_paths`): two single ops
# that match say nothing about which tensor each works on
_MIN_SIDE_RUN = 2

# an autograd node as PyTorch before 1.10 traced it: `CudnnConvolutionBackward`, `ReluBackward1`
_LEGACY_BWD = re.compile(r"^[A-Z]\w*Backward\d*$")
_TOK_H = ("layer_norm", "add", "dropout", "contiguous", "clone", "copy_", "mul", "rms_norm")
_TOK_F = ("gelu", "silu", "relu", "swiglu")
_TOK_V = ("cross_entropy", "log_softmax", "nll_loss", "softmax")
_GEMM = ("linear", "addmm", "matmul", "mm", "bmm")
_CONST = ("view", "reshape", "transpose", "split", "slice", "t", "permute", "expand", "unsqueeze")


ShapeRoles = dict[int, str]  # largest input's element count -> role


def shape_roles(cfg: Any) -> ShapeRoles:
    """The element counts of one micro-batch's activations on a rank of `cfg` (a ModelConfig),
    each with the role that scales with it: tokens x hidden, x FFN width / tp, x vocabulary,
    and the attention scores (batch x heads / tp x seq²)."""
    tokens = cfg.micro_batch * cfg.seq
    heads = max(cfg.heads // max(cfg.tp, 1), 1)
    out: ShapeRoles = {}
    for n, role in (
        # the attention scores (and their mask) grow with the sequence's square
        (cfg.micro_batch * heads * cfg.seq * cfg.seq, "attn"),
        (tokens * max(cfg.vocab, 0), "tok_v"),
        (tokens * (cfg.ffn_size // max(cfg.tp, 1)), "tok_f"),
        (tokens * cfg.hidden, "tok_h"),  # last: wins a tie
    ):
        if n > 1:
            out[n] = role
    return out


class TemplateError(ValueError):
    """The base job cannot be cut into layers (names the job and what is missing)."""


@dataclass
class Template:
    """One representative step of the base job, as arrays over its kept operators (in order).

    ``block`` (BLOCK code), ``layer`` (base layer index, -1 outside layers), ``mb`` (micro-batch,
    -1 outside), ``role`` (ROLE code), ``bwd`` (1 for backward ops), ``dur_ns``, ``gap_ns`` (idle
    time before the op on its thread, kept as the replay delay), ``end_gap_ns`` the idle time from
    the last op to the step's end. ``step_ns`` the job's traced step durations (for the interval).
    ``elems`` the element count of the op's largest input tensor (0 when the trace recorded no
    shapes): an optimizer op's parameter size, from which its per-call cost is fitted.
    ``subclass_ns`` the part of ``dur_ns`` that is a tensor subclass's dispatch (DTensor's tensor
    parallelism: ``template_tasks.sql``), per call whatever the shapes. ``comm_ns`` the
    collective work and waits the op held (left out of ``dur_ns``; mean over the steps).
    """

    job: str
    block: np.ndarray
    layer: np.ndarray
    mb: np.ndarray
    role: np.ndarray
    bwd: np.ndarray
    dur_ns: np.ndarray
    gap_ns: np.ndarray
    end_gap_ns: int
    step_ns: np.ndarray
    names: list[str] = field(default_factory=list)
    rank: int = 0
    elems: np.ndarray | None = None
    subclass_ns: np.ndarray | None = None
    comm_ns: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.elems is None:
            self.elems = np.zeros(self.dur_ns.shape[0], np.int64)
        if self.subclass_ns is None:
            self.subclass_ns = np.zeros(self.dur_ns.shape[0], np.int64)
        if self.comm_ns is None:
            self.comm_ns = np.zeros(self.dur_ns.shape[0], np.int64)

    @property
    def n(self) -> int:
        return int(self.dur_ns.shape[0])

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(
            tmp,
            block=self.block,
            layer=self.layer,
            mb=self.mb,
            role=self.role,
            bwd=self.bwd,
            dur_ns=self.dur_ns,
            gap_ns=self.gap_ns,
            step_ns=self.step_ns,
            elems=self.elems,
            subclass_ns=self.subclass_ns,
            comm_ns=self.comm_ns,
            meta=np.array(
                json.dumps(
                    {
                        "job": self.job,
                        "end_gap_ns": self.end_gap_ns,
                        "rank": self.rank,
                        "names": self.names,
                    }
                )
            ),
        )
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> Template:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            return cls(
                job=meta["job"],
                block=z["block"],
                layer=z["layer"],
                mb=z["mb"],
                role=z["role"],
                bwd=z["bwd"],
                dur_ns=z["dur_ns"],
                gap_ns=z["gap_ns"],
                end_gap_ns=int(meta["end_gap_ns"]),
                step_ns=z["step_ns"],
                names=meta["names"],
                rank=int(meta["rank"]),
                elems=z["elems"],
                subclass_ns=z["subclass_ns"],
                comm_ns=z["comm_ns"],
            )


def _short(name: str) -> str:
    base = name.split("::")[-1] if "::" in name else name
    return base.strip().lower()


def _fwd_role(
    name: str, in_layer: bool, part: str | None, linear_pos: int, n_linear: int, n_qkv: int = 1
) -> str:
    """A forward op's role. A layer's linears, in order: its `n_qkv` Q, K, V projections (the
    linears before its attention op: one fused, or three), the output projection right after
    the attention, the MLP's up (and gate) projections, and its down projection last."""
    if is_attention(name):
        return "attn"
    s = _short(name)
    if s in _GEMM:
        if not in_layer:
            return "gemm_head" if part != "embedding" else "const"
        if linear_pos < n_qkv:
            return "gemm_qkv"
        if linear_pos == n_qkv:
            return "gemm_out"
        return "gemm_down" if linear_pos == n_linear - 1 else "gemm_up"
    if s == "embedding":
        return "emb"
    if s in _TOK_V or (part == "loss"):
        return "tok_v"
    if s in _TOK_F:
        return "tok_f"
    if s in _TOK_H:
        return "tok_h"
    return "const"


def _bwd_role(name: str, fwd_role: str | None) -> str:
    if is_grad_accumulation(name):
        return "param_l"
    return fwd_role or "const"


def _qkv_paths(rows: list[dict[str, Any]]) -> dict[int, int]:
    """PATH codes of the forward layer ops that work on the queries or on the keys and values
    (rows not named are "none"). With three projections before the attention op (Q, K, V: the
    order every Hugging Face attention calls them in), the ops from each projection to the next
    are its path (a Q / K norm). After the last projection, the longest two equal runs of the
    same operators that open its non-view ops (a rotary embedding applied to the queries, then
    to the keys) are the queries' and the keys'; what follows them (a cache update, a partial
    rotary's concatenations) is not named."""
    out: dict[int, int] = {}
    layers: dict[tuple[int, int], list[int]] = {}
    for i, r in enumerate(rows):
        if r["layer"] is not None and r["fwd_mb"] is not None and not r["in_optimizer"]:
            layers.setdefault((int(r["fwd_mb"]), int(r["layer"])), []).append(i)
    for idx in layers.values():
        attn = next((k for k, i in enumerate(idx) if is_attention(rows[i]["name"])), None)
        if attn is None:
            continue
        linears = [k for k in range(attn) if _short(rows[idx[k]]["name"]) in _GEMM]
        if not linears:
            continue
        if len(linears) == 3:
            q, k, v = linears
            out.update({idx[j]: PATH["queries"] for j in range(q, k)})
            out.update({idx[j]: PATH["keys_values"] for j in range(k, v + 1)})
        after = [
            j for j in range(linears[-1] + 1, attn) if _short(rows[idx[j]]["name"]) not in _CONST
        ]
        names = [rows[idx[j]]["name"] for j in after]
        longest = range(len(after) // 2, _MIN_SIDE_RUN - 1, -1)
        run = next((n for n in longest if names[:n] == names[n : 2 * n]), 0)
        # arithmetic on the tensors (a cache's bookkeeping repeats too, on none of them)
        if run and any(_short(n) in _TOK_H for n in names[:run]):
            first, second, last = after[0], after[run], after[2 * run - 1]
            out.update({idx[j]: PATH["queries"] for j in range(first, second)})
            out.update({idx[j]: PATH["keys_values"] for j in range(second, last + 1)})
    return out


def _cut_step(
    rows: list[dict[str, Any]], job: str, sizes: ShapeRoles | None = None
) -> dict[str, list[Any]]:
    """Label one step's ops (dicts from the SQL) into the template's columns."""
    fwd_role_of: dict[int, tuple[str, int]] = {}
    linear_seen: dict[tuple[int, int], int] = {}
    n_linear: dict[tuple[int, int], int] = {}
    n_qkv: dict[tuple[int, int], int] = {}  # linears before the layer's first attention op
    for r in rows:
        if r["layer"] is None or r["fwd_mb"] is None:
            continue
        key = (int(r["fwd_mb"]), int(r["layer"]))
        if _short(r["name"]) in _GEMM:
            n_linear[key] = n_linear.get(key, 0) + 1
        elif is_attention(r["name"]) and key not in n_qkv:
            n_qkv[key] = n_linear.get(key, 0)
    first_fwd = next((i for i, r in enumerate(rows) if r["fwd_mb"] is not None), None)
    if first_fwd is None:
        raise TemplateError(
            f"{job}: no forward_mb<m> (or 'Forward <m>') annotation in the traced steps: the "
            "estimator needs micro-batch annotations to cut the step into layers"
        )
    paths = _qkv_paths(rows)
    path_of: dict[int, int] = {}  # forward op's event -> its PATH code
    out: dict[str, list[Any]] = {
        k: [] for k in ("block", "layer", "mb", "role", "path", "bwd", "i")
    }
    opt_started = False
    for i, r in enumerate(rows):
        name = r["name"]
        if is_comm(name):
            continue  # communication is re-created by the transforms
        layer = -1 if r["layer"] is None else int(r["layer"])
        fmb, bmb = r["fwd_mb"], r["bwd_mb"]
        path = paths.get(i, PATH["none"])
        if r["in_optimizer"]:
            block, mb, role, bwd = "opt", -1, "opt", 0
            opt_started = True
        elif fmb is not None:
            mb, bwd = int(fmb), 0
            key = (mb, layer)
            pos = linear_seen.get(key, 0)
            in_layer = layer >= 0
            # without an attention op between them, the first linear is taken for a fused QKV
            qkv = n_qkv.get(key) or 1
            role = _fwd_role(name, in_layer, r["part"], pos, n_linear.get(key, 0), qkv)
            if sizes and _short(name) not in _CONST:
                by_shape = sizes.get(largest_input(r.get("input_dims")))
                # unnamed ops by shape; element-wise ops on the scores (a mask added to them)
                # grow as the scores do, not as the tokens
                if role == "const" or (role == "tok_h" and by_shape == "attn"):
                    role = by_shape or role
            if _short(name) in _GEMM and in_layer:
                linear_seen[key] = pos + 1
            if in_layer:
                block = "f_layer"
            else:
                block = (
                    "f_pre" if r["part"] == "embedding" or not _seen_layer(out, mb) else "f_post"
                )
            fwd_role_of[int(r["event_idx"])] = (role, layer)
            path_of[int(r["event_idx"])] = path
        elif bmb is not None:
            mb, bwd = int(bmb), 1
            fwd = r["fwd_event_idx"]
            f_role, f_layer = (
                fwd_role_of.get(int(fwd), (None, -1)) if fwd is not None else (None, -1)
            )
            if f_layer < 0 and is_grad_accumulation(name):
                f_layer = _last_layer(out, mb)  # a weight's gradient lands right after its op
            layer = f_layer
            role = _bwd_role(name, f_role)
            path = path_of.get(int(fwd), PATH["none"]) if fwd is not None else PATH["none"]
            if layer >= 0:
                block = "b_layer"
            else:
                block = "b_pre" if _seen_bwd_layer(out, mb) else "b_post"
        else:
            block, layer, mb, role, bwd = ("tail" if opt_started else "head"), -1, -1, "const", 0
            if i > first_fwd and not opt_started:
                block = "head"  # between micro-batches: kept in order with the head's overheads
        out["block"].append(BLOCK[block])
        out["layer"].append(layer)
        out["mb"].append(mb)
        out["role"].append(ROLE[role])
        out["path"].append(path)
        out["bwd"].append(bwd)
        out["i"].append(i)
    return out


def _seen_layer(out: dict[str, list[Any]], mb: int) -> bool:
    return any(
        b == BLOCK["f_layer"] and m == mb for b, m in zip(out["block"], out["mb"], strict=True)
    )


def _seen_bwd_layer(out: dict[str, list[Any]], mb: int) -> bool:
    return any(
        b == BLOCK["b_layer"] and m == mb for b, m in zip(out["block"], out["mb"], strict=True)
    )


def _last_layer(out: dict[str, list[Any]], mb: int) -> int:
    for b, m, ly in zip(
        reversed(out["block"]), reversed(out["mb"]), reversed(out["layer"]), strict=True
    ):
        if m == mb and b == BLOCK["b_layer"]:
            return int(ly)
        if m == mb and b == BLOCK["b_post"]:
            return -1
    return -1


def _is_compiled(name: str) -> bool:
    """A torch.compile region or its autograd function (Dynamo and AOTAutograd's names)."""
    return name.startswith("Torch-Compiled Region") or name.startswith("CompiledFunction")


def _is_bwd(name: str) -> bool:
    return name.startswith("autograd::")


def _period_layers(rows: list[dict[str, Any]], fwd: list[int], job: str) -> list[list[range]]:
    """Layer spans (row ranges) per forward run, from the repeating op-name sequence.

    The unit is the most frequent name sequence from one attention op (else attention-score
    GEMM, `score_gemm`) to the next: consecutive
    attentions separated by exactly the unit are layers of one run (one micro-batch's forward).
    Where a layer starts (the unit's rotation) is what matches the unit both before a run's first
    attention and after its last one; among those offsets, the one whose layer starts with a norm
    closest before the attention (pre-LN blocks), else the longest match before the attention.
    """
    names = [rows[i]["name"] for i in fwd]
    att = [j for j, n in enumerate(names) if is_attention(n)]
    if len(att) < 2:  # attention written out as GEMMs: its scores' GEMM
        att = [j for j, i in enumerate(fwd) if score_shape(names[j], rows[i].get("input_dims"))]
    compiled = sorted({str(r["name"]) for r in rows if _is_compiled(str(r["name"]))})
    if len(att) < 2 and compiled:
        raise TemplateError(
            f"{job}: the step runs as torch.compile'd graphs ({', '.join(compiled[:3])}): their "
            "operators are fused into one region per graph, so there are no per-layer operators "
            "to re-time or repeat; estimate from a trace of the same model run eagerly (without "
            "torch.compile)"
        )
    if len(att) < 2:
        raise TemplateError(
            f"{job}: {len(att)} attention operator(s) or score GEMM(s) in the traced step and no "
            "layer annotation (layer_<i>, nn.Module ...Layer_<i>, layers.<i>): cannot find the "
            "repeated layers"
        )
    segs = [tuple(names[a:b]) for a, b in zip(att, att[1:], strict=False)]
    unit = max(set(segs), key=lambda u: (segs.count(u), -len(u)))
    p = len(unit)
    runs: list[list[int]] = [[att[0]]]
    for i, seg in enumerate(segs):
        if seg == unit:
            runs[-1].append(att[i + 1])
        else:
            runs.append([att[i + 1]])
    lo, hi, k_pre_max = 0, p, 0
    for run in runs:
        a, b = run[0], run[-1]
        k_pre = next(
            k for k in range(min(p, a), -1, -1) if tuple(names[a - k : a]) == unit[p - k :]
        )
        k_post = next(
            q for q in range(min(p, len(names) - b), -1, -1) if tuple(names[b : b + q]) == unit[:q]
        )
        lo, hi = max(lo, p - k_post), min(hi, k_pre)
        k_pre_max = max(k_pre_max, k_pre)
    norms = [k for k in range(max(lo, 1), hi + 1) if is_norm(unit[p - k])]
    off = norms[0] if norms else (hi if lo <= hi else min(k_pre_max, p - 1))
    out: list[list[range]] = []
    for run in runs:
        spans = [range(fwd[a - off], fwd[min(a - off + p, len(fwd)) - 1] + 1) for a in run]
        out.append(spans)
    return out


def _module_layers(rows: list[dict[str, Any]], fwd: list[int]) -> list[list[range]]:
    """Layer spans per forward run from module-name layer indices (`mod_layer`): a run restarts
    when the index does not increase."""
    out: list[list[range]] = []
    prev = None
    for i in fwd:
        ly = rows[i]["mod_layer"]
        if ly is None:
            continue
        ly = int(ly)
        if prev is not None and ly == prev[0]:
            last = out[-1][-1]
            out[-1][-1] = range(last.start, i + 1)
        elif prev is not None and ly > prev[0]:
            out[-1].append(range(i, i + 1))
        else:
            out.append([range(i, i + 1)])
        prev = (ly, i)
    return out


def _infer_labels(rows: list[dict[str, Any]], job: str) -> tuple[list[dict[str, Any]], str]:
    """Rows relabelled with `layer`, `fwd_mb`, `bwd_mb` (and `part` = 'embedding' for each
    micro-batch's ops before its first layer) from general evidence, for traces without the
    trainer's `forward_mb<m>` annotations. Returns the rows and the evidence used."""
    rows = [dict(r) for r in rows]
    n = len(rows)
    opt0 = next((i for i, r in enumerate(rows) if r["in_optimizer"]), n)
    fwd = [i for i in range(opt0) if not _is_bwd(rows[i]["name"]) and not is_comm(rows[i]["name"])]
    if any(rows[i].get("mod_layer") is not None for i in fwd):
        runs, how = _module_layers(rows, fwd), "module names (layer index)"
    else:
        runs, how = _period_layers(rows, fwd, job), "the repeating operator sequence"
    if not runs:
        raise TemplateError(f"{job}: no forward operator inside a layer before the optimizer")
    for mb, spans in enumerate(runs):
        for j, span in enumerate(spans):
            layer = j if how != "module names (layer index)" else int(rows[span.start]["mod_layer"])
            for i in span:
                rows[i]["layer"], rows[i]["fwd_mb"] = layer, mb
        # ops between a run's layers (outside every layer module) stay in the layer before them
        for i in range(spans[0].start, spans[-1].stop):
            if rows[i]["fwd_mb"] is None and not _is_bwd(rows[i]["name"]):
                rows[i]["fwd_mb"], rows[i]["layer"] = mb, rows[i - 1]["layer"]
    linked = {int(r["fwd_event_idx"]) for r in rows if r.get("fwd_event_idx") is not None}
    bounds = [(s[0].start, s[-1].stop) for s in runs]
    at = {int(r["event_idx"]): i for i, r in enumerate(rows)}

    def first_emb(lo: int, hi: int) -> int | None:
        return next((i for i in range(lo, hi) if _short(rows[i]["name"]) == "embedding"), None)

    # a micro-batch's forward starts after the previous one's backward (the loop body: batch
    # slicing, bookkeeping of the previous loss) or, in all-forwards-first schedules, after the
    # previous forward's last op that the backward reads; the first one's start is where the op
    # names before its embedding lookup stop matching the second one's (the rest is the step's head)
    pre_of: dict[int, tuple[int, int]] = {}
    for k in range(len(runs) + 1):
        g0 = bounds[k - 1][1] if k > 0 else 0
        g1 = bounds[k][0] if k < len(runs) else opt0
        auto = [i for i in range(g0, g1) if _is_bwd(rows[i]["name"])]
        after = auto[-1] + 1 if auto else g0
        emb = first_emb(after, g1) if k < len(runs) else None
        post_end = g0
        if k > 0:
            stop = auto[0] if auto else (emb if emb is not None else g1)
            lnk = [i for i in range(g0, stop) if rows[i]["event_idx"] in linked]
            post_end = lnk[-1] + 1 if lnk else g0
            for i in range(g0, post_end):
                rows[i]["fwd_mb"] = k - 1
                if is_loss(rows[i]["name"]):
                    # the loss and the logits' reshapes right before it scale with the vocabulary
                    j = i
                    while j >= g0 and (j == i or _short(rows[j]["name"]) in ("reshape", "view")):
                        rows[j]["part"] = "loss"
                        j -= 1
        if 0 < k < len(runs):
            pre = after if auto else post_end
            pre_of[k] = (pre, emb if emb is not None else pre)
        elif k == 0:
            lnk0 = (i for i in range(g0, g1) if rows[i]["event_idx"] in linked)
            first0 = (g0, g1, emb if emb is not None else next(lnk0, g1))
            pre = g1
        if k < len(runs):
            for i in range(pre, g1):
                rows[i]["fwd_mb"], rows[i]["part"] = k, "embedding"
        # backward ops take their forward op's micro-batch; the autograd seed ops before them
        # and AccumulateGrad (no link) the micro-batch of the next / previous backward op
        cur = k - 1 if k > 0 else 0
        mbs: dict[int, int] = {}
        for i in auto:
            f = rows[i].get("fwd_event_idx")
            fr = rows[at[int(f)]] if f is not None and int(f) in at else None
            if fr is not None and fr["fwd_mb"] is not None:
                cur = int(fr["fwd_mb"])
            mbs[i] = cur
        nxt = None
        for i in reversed(range(post_end, after)):
            if i in mbs:
                nxt = mbs[i]
            if nxt is not None:
                rows[i]["bwd_mb"] = nxt
    g0, g1, pre = first0
    if 1 in pre_of:
        ref = [rows[i]["name"] for i in range(*pre_of[1])]
        while pre > g0 and first0[2] - pre < len(ref):
            if rows[pre - 1]["name"] != ref[len(ref) - (first0[2] - pre) - 1]:
                break
            pre -= 1
    for i in range(pre, g1):
        rows[i]["fwd_mb"], rows[i]["part"] = 0, "embedding"
    return rows, how


def label_step(
    ref: list[dict[str, Any]], job: str, sizes: ShapeRoles | None = None
) -> tuple[dict[str, list[int]], str]:
    """Labels of one step's top-level ops (`template_tasks.sql` rows of one rank and step): per
    row its `block`, `layer`, `mb`, `role` and `path` codes (-1 for rows the template leaves
    out: collectives), and how the layers were found."""
    how = "the trainer's annotations"
    if all(r["fwd_mb"] is None for r in ref):
        ref, how = _infer_labels(ref, job)
    cut = _cut_step(ref, job, sizes)
    out = {k: [-1] * len(ref) for k in ("block", "layer", "mb", "role", "path")}
    for j, i in enumerate(cut["i"]):
        for k in out:
            out[k][i] = int(cut[k][j])
    return out, how


def template_from_rows(
    job: str, rows: list[dict[str, Any]], sizes: ShapeRoles | None = None
) -> Template:
    """Build the template from `template_tasks.sql` rows of one rank (all its steps); `sizes`
    (`shape_roles` of the base configuration) gives unnamed ops their role by shape."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_step.setdefault(int(r["step_no"]), []).append(r)
    if not by_step:
        raise TemplateError(f"{job}: no ProfilerStep with CPU operators in the warehouse")
    steps = sorted(by_step)
    step_ns = np.array([int(by_step[s][0]["step_ns"]) for s in steps], np.int64)
    med = steps[int(np.argsort(step_ns)[len(steps) // 2])]
    ref = by_step[med]
    if not any(_is_bwd(r["name"]) or r["bwd_mb"] is not None for r in ref):
        if any(_LEGACY_BWD.search(r["name"] or "") for r in ref):
            raise TemplateError(
                f"{job}: the traced step's backward is in the legacy form of PyTorch before 1.10 "
                "(autograd nodes such as `ConvolutionBackward0` not wrapped in "
                "autograd::engine::evaluate_function), which carries no link to the forward op: "
                "the estimator needs a trace from PyTorch 1.10 or later"
            )
        raise TemplateError(
            f"{job}: the traced step has no backward operator (autograd::engine::evaluate_function"
            " or backward_mb<m>): a forward-only (inference) trace; the estimator predicts "
            "training steps (forward, backward, optimizer, gradient all-reduce) and cannot invent "
            "backward durations"
        )
    if all(r["fwd_mb"] is None for r in ref):
        ref, _how = _infer_labels(ref, job)
    cut = _cut_step(ref, job, sizes)
    idx = np.array(cut["i"], np.int64)
    sig = [r["name"] for r in ref]
    same = [s for s in steps if [r["name"] for r in by_step[s]] == sig]

    def col(key: str) -> np.ndarray:
        return np.array([[int(by_step[s][i].get(key) or 0) for i in range(len(ref))] for s in same])

    # collective work inside an op (a tensor-parallel function around its all-reduce) and the
    # traced waits for collectives (DDP's last bucket, a pipeline receive) leave the template:
    # the transforms re-create them for the target's parallel degrees
    dur = col("dur_ns")
    in_op = np.minimum(col("comm_in_op_ns"), dur)
    dur = dur - in_op
    # so does activation checkpointing's replay of the forward inside a backward op: the
    # template is the step without it, and the transforms replay the forward where the target
    # recomputes (a base and a target may differ in `recompute`)
    in_replay = np.minimum(col("recompute_ns"), dur)
    dur = dur - in_replay
    # a tensor subclass's dispatch (DTensor) stays in the op; the estimator keeps it apart
    sub = np.minimum(col("subclass_ns"), dur)
    gap = np.maximum(col("gap_ns"), 0)
    wait = np.minimum(col("comm_wait_ns"), gap)
    # a reentrant checkpoint's replayed ops left the thread's ops: they sit in the gap before
    # the backward op after them
    gap_replay = np.minimum(col("recompute_gap_ns"), gap - wait)
    gap = gap - gap_replay
    replay = in_replay + gap_replay
    ends = np.array(
        [
            int(by_step[s][-1]["step_ns"])
            - int(by_step[s][-1]["rel_ns"])
            - int(by_step[s][-1]["dur_ns"])
            for s in same
        ]
    )
    dur_f = np.median(dur, axis=0)
    gap_f = np.median(gap - wait, axis=0)
    # the Python before an op on a tensor subclass is the subclass's too (DTensor's module hooks
    # turn inputs into DTensors and back): it moves into the op's dispatch part
    sub_f = np.median(sub, axis=0)
    move = np.where(sub_f > 0, gap_f, 0.0)
    dur_f, gap_f, sub_f = dur_f + move, gap_f - move, sub_f + move
    end_f = float(max(np.median(ends), 0))
    # per-position medians sum to less than the median step (the noise is right-skewed): scale
    # them so that the template's step is the median traced step, which estimates are judged on;
    # less each step's own communication, which is skewed far more (one all-reduce of a step
    # waits 5 ms, the others 0.5): its per-position medians would leave the compute to fill it
    comm = (in_op + wait + replay).sum(axis=1)
    target = float(np.median(step_ns))
    if comm.any():
        same_ns = np.array([int(by_step[s][0]["step_ns"]) for s in same])
        target = float(np.median(same_ns - comm))
    total = dur_f.sum() + gap_f.sum() + end_f
    k = target / total if total > 0 else 1.0
    dur_m = np.rint(dur_f * k).astype(np.int64)
    sub_m = np.minimum(np.rint(sub_f * k).astype(np.int64), dur_m)
    gap_m = np.rint(gap_f * k).astype(np.int64)
    at = {int(r["event_idx"]): j for j, r in enumerate(ref)}
    # dropped collectives' time is not idle time: their slot is removed from the thread, so the
    # gap before the next kept op is kept as-is (the collective is re-created by the transforms)
    return Template(
        job=job,
        block=np.array(cut["block"], np.int8),
        layer=np.array(cut["layer"], np.int64),
        mb=np.array(cut["mb"], np.int64),
        role=np.array(cut["role"], np.int8),
        bwd=np.array(cut["bwd"], np.int8),
        dur_ns=dur_m[idx],
        gap_ns=gap_m[idx],
        end_gap_ns=int(round(end_f * k)),
        step_ns=step_ns,
        names=[ref[i]["name"] for i in idx],
        rank=int(ref[0]["rank"]),
        elems=np.array([_elems(ref, i, at) for i in idx], np.int64),
        subclass_ns=sub_m[idx],
        comm_ns=_median_step_share(in_op)[idx],
    )


def _median_step_share(x: np.ndarray) -> np.ndarray:
    """Per position (columns) over steps (rows): the mean, scaled so that the positions sum to
    the median step's total. A step's waits are skewed (one of them 10x the rest, in another
    position each step): per-position medians lose them, means count the slow step's."""
    total = x.sum(axis=1)
    mean = x.mean(axis=0)
    k = float(np.median(total)) / float(total.mean()) if total.mean() > 0 else 0.0
    return np.rint(mean * k).astype(np.int64)


def _elems(rows: list[dict[str, Any]], i: int, at: dict[int, int]) -> int:
    """`largest_input` of row i; for a backward function (no input dims of its own), its forward
    op's (`at`: event_idx -> row): the tensors its gradients have."""
    own = largest_input(rows[i].get("input_dims"))
    fwd = rows[i].get("fwd_event_idx")
    if own or fwd is None or int(fwd) not in at:
        return own
    return largest_input(rows[at[int(fwd)]].get("input_dims"))


def largest_input(input_dims: Any) -> int:
    """Elements of the largest tensor in a Kineto `Input Dims` value (a JSON list of shapes; an
    empty shape is a scalar, non-list entries are other arguments); 0 when there is none."""
    if isinstance(input_dims, str):
        try:
            input_dims = json.loads(input_dims)
        except ValueError:
            return 0
    best = 0
    for shape in input_dims or ():
        if isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape):
            best = max(best, math.prod(shape))
    return best


def template_path(root: Path, job: str) -> Path:
    """The cache file of `job`'s template (the folder also holds base.json and comm.json). Named
    by a hash of the job so that a cached estimate need not import the warehouse layout."""
    digest = hashlib.sha256(job.encode()).hexdigest()[:20]
    return Path(root) / "estimate_templates" / digest / "template.npz"


def template_dir(root: Path, job: str) -> Path:
    return template_path(root, job).parent


def manifest_stamp(root: Path) -> str:
    """The names of the manifest's parts: every ingest commit adds one (or compacts them)."""
    d = Path(root) / "manifest"
    names = sorted(p.name for p in d.glob("part-*.parquet")) if d.is_dir() else []
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


def extract_template(
    wh: Any,
    job: str,
    rank: int | None = None,
    *,
    cache: bool = True,
    sizes: ShapeRoles | None = None,
) -> Template:
    """The template of `job` (rank: the first rank holding a `layer_0` op, else the lowest);
    `sizes` as in `template_from_rows`."""
    path = template_path(wh.root, job)
    if cache and path.exists():
        return Template.load(path)

    import lumos_sql
    from warehouse.catalog import connect as catalog_connect
    from warehouse.catalog import job_events_view

    con = catalog_connect(str(wh.catalog))
    try:
        job_events_view(con, job)  # template_tasks reads the job's own files
        cur = con.execute(lumos_sql.load("estimate/template_tasks"), {"job": job})
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
        if not rows:
            from lumos.estimate.infer import job_not_found, known_jobs

            if job not in known_jobs(con):
                raise job_not_found(con, job)
    finally:
        con.close()
    if not rows:
        raise TemplateError(f"{job}: no traced step (ProfilerStep) with CPU operators")
    ranks = sorted({int(r["rank"]) for r in rows})
    if rank is None:
        rank = ranks[0]
    elif rank not in ranks:
        raise TemplateError(f"{job}: rank {rank} not in the warehouse (ranks {ranks})")
    tpl = template_from_rows(job, [r for r in rows if int(r["rank"]) == rank], sizes)
    if cache:
        tpl.save(path)
    return tpl
