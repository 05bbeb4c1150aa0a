"""The operator taxonomy (lumos_sql/taxonomy.py): one rule set, read the same by SQL and Python,
checked on real traces against what the traces themselves say an event is."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lumos.api import Warehouse
from lumos_sql import taxonomy
from lumos_sql.taxonomy import CommPart, OpClass

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def names_wh(shared_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    """NCCL on an A100 and on eight V100 ranks, gloo on CPU ranks, a single-H100 LLaMA step, an
    MI300X training and an H100 inference trace (HIP and Hugging Face operator names), and
    Megatron-LM's tensor-parallel GPT."""
    wh = Warehouse.open(tmp_path_factory.mktemp("taxonomy") / "wh", create=True)
    runs = {
        "nccl_a100": shared_traces / "hta" / "nccl_parser_config",
        "dlrm": shared_traces / "param" / "dlrm_8rank" / "kineto",
        "gloo_dp2": ROOT / "tests" / "data" / "corpus" / "dp2",
        "llama": shared_traces / "gpu_h100" / "llama_base",
        "mi300x": shared_traces / "tracelens" / "mi300x_ddp_resnet18_train.json.gz",
        "qwen": shared_traces / "tracelens" / "h100_qwen1.5-0.5b_inference.json.gz",
        "megatron": ROOT / "tests" / "data" / "megatron_tp2",
    }
    for job, path in runs.items():
        report = wh.ingest([path], job=job)
        assert not report.refused, report.refused
    return wh


def test_sql_and_python_agree_on_every_name(names_wh: Warehouse) -> None:
    rows = names_wh.arrow(
        "SELECT name, comm_part(name) AS part, op_class(name) AS cls, is_comm(name) AS comm, "
        "is_comm_kernel(name) AS kernel, is_peer_copy(name) AS peer, is_attention(name) AS att, "
        "is_sm_copy(name) AS sm_copy, "
        "is_megatron(name) AS megatron, is_megatron_sp(name) AS megatron_sp, "
        "is_attention_pass(name) AS att_pass, is_grad_accumulation(name) AS acc "
        "FROM (SELECT DISTINCT name FROM events WHERE name IS NOT NULL)"
    ).to_pylist()
    assert len(rows) > 500
    for r in rows:
        n = r["name"]
        part = taxonomy.comm_part(n)
        got = tuple(
            r[k]
            for k in (
                "part",
                "cls",
                "comm",
                "kernel",
                "peer",
                "att",
                "megatron",
                "megatron_sp",
                "sm_copy",
                "att_pass",
                "acc",
            )
        )
        want = (
            None if part is None else str(part),
            str(taxonomy.op_class(n)),
            taxonomy.is_comm(n),
            taxonomy.is_comm_kernel(n),
            taxonomy.is_peer_copy(n),
            taxonomy.is_attention(n),
            taxonomy.is_megatron(n),
            taxonomy.is_megatron_sp(n),
            taxonomy.is_sm_copy(n),
            taxonomy.is_attention_pass(n),
            taxonomy.is_grad_accumulation(n),
        )
        assert got == want, n
    assert {r["name"] for r in rows if r["sm_copy"]} >= {"Memcpy DtoD (Device -> Device)"}
    assert {r["name"] for r in rows if r["acc"]} >= {
        "torch::autograd::AccumulateGrad",
        "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
    }
    megatron = {r["name"] for r in rows if r["megatron"]}
    assert "_ReduceFromModelParallelRegion" in megatron
    assert "LinearWithGradAccumulationAndAsyncCommunicationBackward" in megatron
    assert not any(r["megatron_sp"] for r in rows)  # the recorded run has no sequence parallelism


def test_comm_kernels_are_the_kernels_that_carry_collective_arguments(
    names_wh: Warehouse,
) -> None:
    # NCCL kernels of recent PyTorch carry `Collective name`: the trace's own word on what is one
    rows = names_wh.arrow(
        "SELECT job, name, bool_or(coll_name IS NOT NULL) AS has_args, "
        "any_value(is_comm_kernel(name)) AS comm "
        "FROM events WHERE cat = 'kernel' GROUP BY job, name"
    ).to_pylist()
    with_args = [r for r in rows if r["has_args"]]
    assert with_args, "the A100 NCCL trace records collective arguments on its kernels"
    assert all(r["comm"] for r in with_args)
    # and on a single-GPU run, no kernel is communication
    assert not any(r["comm"] for r in rows if r["job"] == "llama")
    assert any(r["comm"] for r in rows if r["job"] == "dlrm")


def test_gloo_parts_on_cpu_ranks(names_wh: Warehouse) -> None:
    parts = dict(
        names_wh.arrow(
            "SELECT comm_part(name) AS part, count(*) AS n FROM events "
            "WHERE job = 'gloo_dp2' AND is_comm(name) GROUP BY 1"
        )
        .to_pandas()
        .itertuples(index=False, name=None)
    )
    # DDP over gloo: the process group's calls and gloo's own spans of the work, one per call
    assert parts.get("call", 0) > 0 and parts.get("work", 0) > 0
    assert parts.get("kernel", 0) == 0


def test_llama_step_classes(names_wh: Warehouse) -> None:
    rows = names_wh.arrow(
        "SELECT op_class(name) AS cls, name FROM events "
        "WHERE job = 'llama' AND cat = 'cpu_op' GROUP BY ALL"
    ).to_pylist()
    by: dict[str, set[str]] = {}
    for r in rows:
        by.setdefault(r["cls"], set()).add(r["name"])
    assert "aten::scaled_dot_product_attention" in by["attention"]
    assert any("Backward" in n for n in by["attention"])  # the backward nodes, CamelCase
    assert {"aten::mm", "aten::addmm"} & by["gemm"]
    assert any("nll_loss" in n for n in by["loss"])
    assert any(n.startswith("aten::_foreach_") for n in by["optimizer"])
    assert "comm" not in by
    # each optimizer op runs inside torch's `Optimizer.step#` annotation
    outside = names_wh.arrow(
        "WITH opt AS (SELECT ts_ns, ts_ns + dur_ns AS end_ns FROM events WHERE job = 'llama' "
        "AND starts_with(name, 'Optimizer.step#')) "
        "SELECT count(*) AS n FROM events AS e WHERE job = 'llama' AND cat = 'cpu_op' "
        "AND starts_with(name, 'aten::_foreach_') "
        "AND NOT EXISTS (SELECT 1 FROM opt WHERE e.ts_ns >= opt.ts_ns AND e.ts_ns < opt.end_ns)"
    ).column("n")[0]
    assert outside.as_py() == 0


def test_task_kinds_follow_the_graph_codes(names_wh: Warehouse) -> None:
    from kernels.graph import Kind

    got = names_wh.arrow(
        "SELECT kind_cpu_op() AS a, kind_collective() AS b, rt_event() AS c"
    ).to_pylist()[0]
    from kernels.graph import Rt

    assert got == {"a": int(Kind.CPU_OP), "b": int(Kind.COLLECTIVE), "c": int(Rt.EVENT)}


def test_the_rules_are_written_once() -> None:
    """No SQL file or Python module outside the taxonomy tests a name for communication or
    attention with its own pattern."""
    pats = [
        re.compile(r"LIKE\s+'%?(nccl|c10d|gloo|rccl)", re.I),
        re.compile(r"LIKE\s+'%attention", re.I),
        re.compile(r"startswith\(\s*\"(c10d::|gloo:|nccl:)"),
        re.compile(r"in\s+\(\s*\"(c10d::|gloo:|nccl:)"),
        re.compile(r"\"attention\"\s+in\s+\w"),
    ]
    offenders = []
    for folder in ("lumos_sql", "lumos", "warehouse", "kernels", "pipelines"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".sql", ".py") or path.name == "taxonomy.py":
                continue
            if "groundtruth" in path.parts:  # the recorder's own process groups, not trace reading
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if line.lstrip().startswith(("--", "#")):
                    continue
                if any(p.search(line) for p in pats):
                    offenders.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_unknown_and_missing_names() -> None:
    assert taxonomy.op_class(None) is OpClass.OTHER
    assert taxonomy.comm_part("") is None
    assert taxonomy.comm_part("nccl:all_reduce") is CommPart.WORK
    assert taxonomy.comm_part("ncclDevKernel_AllReduce_Sum_f32_RING_LL") is CommPart.KERNEL
    assert taxonomy.comm_part("_c10d_functional::wait_tensor") is CommPart.WAIT
