"""`lumos describe --job JOB`: the base configuration inferred from a job's trace, each field with
its evidence and confidence, and the memory per rank it implies."""

from __future__ import annotations

import argparse
import json
import sys

from lumos.commands.local import on_local_warehouse
from lumos.commands.options import add_warehouse, job_name


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "describe",
        help="infer a job's model and parallel configuration (and memory per rank) from its trace",
    )
    p.add_argument("--job", type=job_name, required=True, help="job name in the warehouse")
    add_warehouse(p)
    p.add_argument(
        "--base",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="state or override a field (e.g. --base layers=48 tp=8); wins over the trace",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=on_local_warehouse("describe", _run_local))


def _gib(n: int | None) -> str:
    if not n:
        return "-"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def _run_local(args: argparse.Namespace) -> int:
    """The command on a local warehouse (an S3 one's mirror)."""
    from lumos.api import Warehouse, WarehouseNotFound
    from lumos.estimate.config import ConfigError, parse_overrides
    from lumos.estimate.infer import JobNotFound, infer_base
    from lumos.estimate.memory import estimate_memory

    try:
        given = parse_overrides(args.base, "--base")
        inference = infer_base(Warehouse.open(args.warehouse), args.job, given)
    except (WarehouseNotFound, JobNotFound, ConfigError) as exc:
        print(f"lumos describe: {exc}", file=sys.stderr)
        return 2
    memory = None
    try:
        memory = estimate_memory(inference.config)
    except ConfigError as exc:
        inference.warnings.append(f"memory not estimated: {exc}")
    profiler = _profiler_cost(args, given)
    if args.json:
        out = inference.to_dict()
        out["memory"] = memory.to_dict() if memory else None
        out["host_cores"] = inference.host_cores or None
        out["profiler"] = profiler
        print(json.dumps(out, indent=2))
        return 0
    print(f"job {inference.job}" + ("" if inference.transformer else "  (not a transformer?)"))
    print(f"{'field':<18} {'value':>14} {'conf':>5} {'source':<8} evidence")
    for key, ev in inference.fields.items():
        print(f"{key:<18} {str(ev.value):>14} {ev.confidence:>5.2f} {ev.source:<8} {ev.evidence}")
    if memory:
        peak = memory.peak
        fits = {None: "unknown device memory", True: "fits", False: "DOES NOT FIT"}[memory.fits]
        print(
            f"memory per rank (stage {peak.stage}): {_gib(memory.memory_bytes)} = params "
            f"{_gib(peak.param_bytes)} + grads {_gib(peak.grad_bytes)} + optimizer "
            f"{_gib(peak.optimizer_bytes)} + activations {_gib(peak.activation_bytes)}; device "
            f"{_gib(memory.device_memory)}: {fits}"
        )
    if inference.host_cores:
        print(
            f"host: {inference.host_cores} CPU cores, as the trace's recorder wrote (more ranks "
            "than that time-share them in estimates)"
        )
    if profiler:
        print(
            f"profiler: the traced step {profiler['traced_ns'] / 1e6:.1f} ms, "
            f"{profiler['unprofiled_ns'] / 1e6:.1f} ms without it ({profiler['graph']} replayed "
            f"less {profiler['event_ns'] / 1e3:.1f} us per recorded CPU event): the profiler's "
            f"share {100 * profiler['share']:.0f}%"
        )
    for w in inference.warnings:
        print(f"warning: {w}")
    return 0


def _profiler_cost(args: argparse.Namespace, given: dict) -> dict | None:
    """What the profiler added to a GPU base's step (a multi-rank base's first rank's): its
    step graph replayed with and without the profiler's per-event cost
    (`lumos.estimate.gpu_estimate`); None for a base without GPU work or whose graph cannot be
    cut into layers."""
    from lumos.estimate.config import ConfigError
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.profiler_cost import PROFILER_EVENT_NS
    from lumos.estimate.template import TemplateError
    from lumos.estimate.transforms import TransformError

    try:
        est = Estimator.open(args.warehouse, args.job, given)
        if est.gpu is None:
            return None
        p = est.explain(est.base)
    except (ConfigError, TemplateError, TransformError, LookupError, ValueError):
        return None  # an optional line: what cannot be cut into a step graph is said elsewhere
    if not p.breakdown or "traced_step" not in p.breakdown:
        return None
    traced = int(p.breakdown["traced_step"])
    return {
        "traced_ns": traced,
        "unprofiled_ns": int(p.predicted_ns),
        "share": 1.0 - p.predicted_ns / traced if traced else 0.0,
        "event_ns": PROFILER_EVENT_NS,
        "graph": f"rank {est.gpu.rank}'s step graph" if est.rank_only else "its step graph",
    }
