"""The operator taxonomy: what an event is, decided once for SQL and Python.

The rules are data (`COMM_RULES`, `CLASS_RULES`). Python asks `op_class`, `comm_part` and the
`is_*` functions; SQL calls DuckDB macros of the same names that `install` renders from the same
rules, together with the task-kind and runtime-dependency codes of `kernels.graph` as
`kind_<name>()` and `rt_<name>()`, and the graph rules' named thresholds (`thresholds`).
`tests/test_taxonomy.py` checks that both agree on every event name of the shared traces. The catalog file holds the macros (`warehouse.catalog.build_catalog`),
so `lumos sql` and a plain `duckdb` shell have them for the user's own queries.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from typing import Any, NamedTuple

from kernels.graph import Kind, Rt
from lumos_sql import thresholds

__all__ = [
    "CLASS_RULES",
    "COMM_RULES",
    "CommPart",
    "MEGATRON_RULES",
    "MEGATRON_SP_RULES",
    "OpClass",
    "Rule",
    "comm_part",
    "install",
    "is_attention",
    "is_attention_pass",
    "is_comm",
    "is_comm_kernel",
    "is_gemm",
    "is_grad_accumulation",
    "is_loss",
    "is_megatron",
    "is_megatron_sp",
    "is_norm",
    "is_optimizer",
    "is_peer_copy",
    "is_sm_copy",
    "macros_sql",
    "op_class",
]


class OpClass(StrEnum):
    """What an operator, annotation or kernel computes (`op_class`)."""

    COMM = "comm"
    ATTENTION = "attention"
    GEMM = "gemm"
    LOSS = "loss"
    NORM = "norm"
    OPTIMIZER = "optimizer"
    OTHER = "other"


class CommPart(StrEnum):
    """Which part of a collective an event is (`comm_part`)."""

    WAIT = "wait"  # functional collectives' wait (`_c10d_functional::wait_tensor`)
    CALL = "call"  # the process group's call (`c10d::allreduce_`), which waits when synchronous
    ISSUE = "issue"  # a functional collective's asynchronous issue (`_c10d_functional::all_reduce`)
    WORK = "work"  # the backend's span of the work (`gloo:all_reduce`, `nccl:all_reduce`, `mpi:`)
    RECORD = "record"  # the profiler's record of its arguments (`record_param_comms`)
    KERNEL = "kernel"  # the GPU kernel (NCCL / RCCL)


class Rule(NamedTuple):
    """`test` of `pattern` on an event name: `prefix`, `suffix` and `equals` compare the name as
    written; `word` looks for the pattern in the name lower-cased with `_` removed, so that
    `aten::native_layer_norm` and `NativeLayerNormBackward0` both hold `layernorm`."""

    test: str
    pattern: str


# First match wins, in this order: a functional wait is not a call, `nccl:` is the backend's
# work annotation while any other name holding `nccl` is a kernel.
COMM_RULES: tuple[tuple[CommPart, tuple[Rule, ...]], ...] = (
    (CommPart.WAIT, (Rule("suffix", "c10d_functional::wait_tensor"),)),
    (CommPart.CALL, (Rule("prefix", "c10d::"),)),
    (CommPart.ISSUE, (Rule("word", "c10dfunctional::"),)),
    (CommPart.WORK, (Rule("prefix", "gloo:"), Rule("prefix", "nccl:"), Rule("prefix", "mpi:"))),
    (CommPart.RECORD, (Rule("equals", "record_param_comms"),)),
    (CommPart.KERNEL, (Rule("word", "nccl"), Rule("word", "rccl"))),
)

# Megatron-LM's own autograd functions (each also recorded as `<name>Backward`): its
# tensor-parallel linears and their collectives, sequence parallelism's scatter/gather and the
# vocabulary-parallel cross-entropy. A trace holding them runs Megatron, whose activations are
# sequence-first ([s, b, h]) and whose embedding and LM head are split by vocabulary.
MEGATRON_RULES: tuple[Rule, ...] = tuple(
    Rule("prefix", n)
    for n in (
        "LinearWithGradAccumulationAndAsyncCommunication",
        "_CopyToModelParallelRegion",
        "_ReduceFromModelParallelRegion",
        "_ScatterToModelParallelRegion",
        "_GatherFromModelParallelRegion",
        "_ScatterToSequenceParallelRegion",
        "_GatherFromSequenceParallelRegion",
        "_ReduceScatterToSequenceParallelRegion",
        "_VocabParallelCrossEntropy",
    )
)
# of those, the ones only sequence parallelism runs
MEGATRON_SP_RULES: tuple[Rule, ...] = tuple(r for r in MEGATRON_RULES if "Sequence" in r.pattern)


# After communication, first match wins: attention before GEMM (`aten::bmm` is a GEMM, but a
# fused attention operator that holds GEMMs is attention), loss before normalisation.
CLASS_RULES: tuple[tuple[OpClass, tuple[Rule, ...]], ...] = (
    (
        OpClass.ATTENTION,
        tuple(Rule("word", w) for w in ("attention", "flash", "sdpa", "fusedattn")),
    ),
    (
        OpClass.GEMM,
        tuple(
            Rule("equals", n)
            for n in ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
        ),
    ),
    (
        OpClass.LOSS,
        tuple(
            Rule("word", w)
            for w in ("crossentropy", "nllloss", "mseloss", "l1loss", "huberloss", "kldiv")
        ),
    ),
    (
        OpClass.NORM,
        tuple(
            Rule("word", w)
            for w in ("layernorm", "rmsnorm", "groupnorm", "batchnorm", "instancenorm")
        ),
    ),
    (
        OpClass.OPTIMIZER,
        (
            Rule("prefix", "aten::_foreach_"),
            Rule("prefix", "aten::_fused_adam"),
            Rule("prefix", "aten::_fused_sgd"),
            Rule("prefix", "Optimizer.step#"),
            Rule("prefix", "Optimizer.zero_grad#"),
        ),
    ),
)

# Kernels of a fused attention that pass once over its [batch, seq, heads, head size] tensors (the
# backward's dO·O pre-pass and its dQ/dK/dV conversions, in cuDNN's, FlashAttention 2's and 3's
# names): their time follows the tokens, not the scores' seq², unlike the attention's own kernels.
ATTENTION_PASS_RULES = tuple(
    Rule("word", w)
    for w in ("dot_do_o", "convert_dq", "convert_dkv", "bwd_preprocess", "bwd_postprocess")
)

# A parameter's gradient landing in its `.grad` (autograd's `AccumulateGrad` node, with its
# `evaluate_function` wrapper): one per parameter tensor in every backward.
GRAD_ACCUMULATION_RULES = (Rule("word", "AccumulateGrad"),)

# A copy between two GPUs (`Memcpy PtoP (Device -> Device)`): communication when it is a copy task.
PEER_COPY_RULES = (Rule("word", "ptop"), Rule("word", "peer"))

# A copy within one GPU (`Memcpy DtoD (Device -> Device)`): the driver runs it as a kernel on the
# SMs, not on a copy engine. On the shared traces no DtoD copy runs inside a kernel of another
# stream that fills every SM (0 of 4,645 on trace_diff/test, 0 of 2,040 on df_index_resolver),
# while host copies often do (57 of 151 HtoD on test): it waits for SMs as a kernel does.
SM_COPY_RULES = (Rule("prefix", "Memcpy DtoD"),)


def _folded(name: str) -> str:
    return name.lower().replace("_", "")


def _match(rule: Rule, name: str, folded: str) -> bool:
    if rule.test == "prefix":
        return name.startswith(rule.pattern)
    if rule.test == "suffix":
        return name.endswith(rule.pattern)
    if rule.test == "equals":
        return name == rule.pattern
    return _folded(rule.pattern) in folded


def _first(rules: tuple[tuple[Any, tuple[Rule, ...]], ...], name: str) -> Any:
    folded = _folded(name)
    for value, group in rules:
        if any(_match(r, name, folded) for r in group):
            return value
    return None


@cache
def comm_part(name: str | None) -> CommPart | None:
    """The part of a collective that event `name` is, None when it is not communication."""
    return _first(COMM_RULES, name) if name else None


@cache
def op_class(name: str | None) -> OpClass:
    """What event `name` computes (OTHER for an unknown or missing name)."""
    if not name:
        return OpClass.OTHER
    if comm_part(name) is not None:
        return OpClass.COMM
    return _first(CLASS_RULES, name) or OpClass.OTHER


def is_comm(name: str | None) -> bool:
    return comm_part(name) is not None


def is_comm_kernel(name: str | None) -> bool:
    return comm_part(name) is CommPart.KERNEL


def is_attention(name: str | None) -> bool:
    return op_class(name) is OpClass.ATTENTION


def is_gemm(name: str | None) -> bool:
    return op_class(name) is OpClass.GEMM


def is_loss(name: str | None) -> bool:
    return op_class(name) is OpClass.LOSS


def is_norm(name: str | None) -> bool:
    return op_class(name) is OpClass.NORM


def is_optimizer(name: str | None) -> bool:
    return op_class(name) is OpClass.OPTIMIZER


def is_megatron(name: str | None) -> bool:
    """One of Megatron-LM's own autograd functions (`MEGATRON_RULES`)."""
    return bool(name) and any(_match(r, name, _folded(name)) for r in MEGATRON_RULES)


def is_megatron_sp(name: str | None) -> bool:
    """One of Megatron's sequence-parallel scatters and gathers (`MEGATRON_SP_RULES`)."""
    return bool(name) and any(_match(r, name, _folded(name)) for r in MEGATRON_SP_RULES)


def is_attention_pass(name: str | None) -> bool:
    """A fused attention's kernel that passes once over its tensors (`ATTENTION_PASS_RULES`)."""
    return bool(name) and any(_match(r, name, _folded(name)) for r in ATTENTION_PASS_RULES)


def is_grad_accumulation(name: str | None) -> bool:
    """Autograd's accumulation of one parameter's gradient (`GRAD_ACCUMULATION_RULES`)."""
    return bool(name) and any(_match(r, name, _folded(name)) for r in GRAD_ACCUMULATION_RULES)


def is_sm_copy(name: str | None) -> bool:
    """A GPU copy that runs on the SMs (within one device), by its name (`SM_COPY_RULES`)."""
    return bool(name) and any(_match(r, name, _folded(name)) for r in SM_COPY_RULES)


def is_peer_copy(name: str | None) -> bool:
    """A GPU copy between devices, by its name (the caller checks that the task is a copy)."""
    return bool(name) and any(_match(r, name, _folded(name)) for r in PEER_COPY_RULES)


# ---- SQL rendering ---------------------------------------------------------------------------


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sql_match(rule: Rule) -> str:
    if rule.test == "prefix":
        return f"starts_with(n, {_sql_str(rule.pattern)})"
    if rule.test == "suffix":
        return f"ends_with(n, {_sql_str(rule.pattern)})"
    if rule.test == "equals":
        return f"n = {_sql_str(rule.pattern)}"
    return f"contains(replace(lower(n), '_', ''), {_sql_str(_folded(rule.pattern))})"


def _sql_any(rules: tuple[Rule, ...]) -> str:
    return "(" + " OR ".join(_sql_match(r) for r in rules) + ")"


def _sql_case(rules: tuple[tuple[Any, tuple[Rule, ...]], ...], default: str) -> str:
    whens = " ".join(f"WHEN {_sql_any(g)} THEN {_sql_str(str(v))}" for v, g in rules)
    return f"CASE WHEN n IS NULL THEN {default} {whens} ELSE {default} END"


@cache
def macros_sql(temp: bool = True) -> str:
    """The `CREATE OR REPLACE [TEMP] MACRO` statements that define the taxonomy in SQL: temporary
    ones for `install`, persistent ones for the warehouse's catalog file (so that any connection
    to it, the `duckdb` shell's too, has them)."""
    ops = [
        f"comm_part(n) AS {_sql_case(COMM_RULES, 'NULL')}",
        "is_comm(n) AS comm_part(n) IS NOT NULL",
        f"is_comm_kernel(n) AS coalesce(comm_part(n) = {_sql_str(CommPart.KERNEL)}, false)",
        "op_class(n) AS CASE WHEN is_comm(n) THEN 'comm' ELSE "
        f"{_sql_case(CLASS_RULES, _sql_str(OpClass.OTHER))} END",
        f"is_attention(n) AS op_class(n) = {_sql_str(OpClass.ATTENTION)}",
        f"is_gemm(n) AS op_class(n) = {_sql_str(OpClass.GEMM)}",
        f"is_loss(n) AS op_class(n) = {_sql_str(OpClass.LOSS)}",
        f"is_norm(n) AS op_class(n) = {_sql_str(OpClass.NORM)}",
        f"is_optimizer(n) AS op_class(n) = {_sql_str(OpClass.OPTIMIZER)}",
        f"is_peer_copy(n) AS coalesce({_sql_any(PEER_COPY_RULES)}, false)",
        f"is_attention_pass(n) AS coalesce({_sql_any(ATTENTION_PASS_RULES)}, false)",
        f"is_sm_copy(n) AS coalesce({_sql_any(SM_COPY_RULES)}, false)",
        f"is_grad_accumulation(n) AS coalesce({_sql_any(GRAD_ACCUMULATION_RULES)}, false)",
        f"is_megatron(n) AS coalesce({_sql_any(MEGATRON_RULES)}, false)",
        f"is_megatron_sp(n) AS coalesce({_sql_any(MEGATRON_SP_RULES)}, false)",
    ]
    ops += [f"kind_{k.name.lower()}() AS {int(k)}" for k in Kind]
    ops += [f"rt_{r.name.lower()}() AS {int(r)}" for r in Rt]
    ops += thresholds.macros()
    create = "CREATE OR REPLACE TEMP MACRO" if temp else "CREATE OR REPLACE MACRO"
    return "\n".join(f"{create} {m};" for m in ops)


def install(con: Any) -> Any:
    """Define the taxonomy's macros on DuckDB connection `con` (read-only ones too); returns it."""
    con.execute(macros_sql())
    return con
