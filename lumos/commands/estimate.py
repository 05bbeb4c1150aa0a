"""`lumos estimate --job JOB --set key=value ...`: predict one configuration from a job's trace
(iteration time with an interval and a breakdown, tokens per second and MFU, memory per rank,
whether it fits, warnings)."""

from __future__ import annotations

import argparse
import json
import sys

from lumos.commands.local import on_local_warehouse
from lumos.commands.options import add_host_cores, add_warehouse, job_name


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "estimate",
        help="predict the iteration time and memory of another configuration of a traced job",
        description="Predict a configuration from the trace of JOB: the base configuration is "
        "inferred (see `lumos describe`) and overridden with --base; --set gives the target's "
        "keys (layers hidden ffn heads kv_heads seq micro_batch num_micro_batches vocab dp pp tp "
        "pp_schedule ...) and kernel-class speed-ups (speedup.gemm=2, speedup.attn=1.5, "
        "speedup.comm=2, speedup.all=1.1). Exits 2 on a bad key or value.",
    )
    p.add_argument("--job", type=job_name, required=True, help="base job name in the warehouse")
    add_warehouse(p)
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE")
    p.add_argument("--base", nargs="+", action="extend", default=[], metavar="KEY=VALUE")
    add_host_cores(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--save", action="store_true", help="also write the row to `estimates`")
    p.set_defaults(func=on_local_warehouse("estimate", _run_local))


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


def _run_local(args: argparse.Namespace) -> int:
    """The command on a local warehouse (an S3 one's mirror)."""
    from lumos.estimate.config import ConfigError, parse_overrides
    from lumos.estimate.estimator import Estimator, split_speedups
    from lumos.estimate.template import TemplateError
    from lumos.estimate.throughput import job_device, mfu_note, throughput
    from lumos.estimate.transforms import TransformError
    from warehouse.no_pandas import block_pandas

    try:
        base = parse_overrides(args.base, "--base")
        keys, speed = split_speedups(args.set, "--set")
        try:
            est = Estimator.open(
                args.warehouse, args.job, base, on_build=_say, host_cores=args.host_cores
            )
        except TemplateError as exc:
            if keys or base or args.save:
                raise TemplateError(
                    f"{exc}; speed-up what-ifs (--set speedup.<class>=N alone) can still be "
                    "estimated from its step graph"
                ) from exc
            # the model is not read, but its step graph answers speed-up what-ifs
            return _whatif(args, speed, str(exc))
        if not args.save:
            # what follows holds no pandas object: pyarrow's probe for one would import pandas,
            # 0.2 s of a cached estimate's start-up (`--save` writes through pandas)
            block_pandas()
        target = est.target(keys, "--set")
        pred = est.explain(target, speed)
        device = job_device(args.warehouse, args.job)
    except (ConfigError, TemplateError, TransformError, LookupError, FileNotFoundError) as exc:
        print(f"lumos estimate: {exc}", file=sys.stderr)
        return 2
    if args.save:
        import uuid

        from lumos.api import Warehouse
        from lumos.estimate.store import write_estimates

        write_estimates(
            Warehouse.open(args.warehouse), uuid.uuid4().hex[:12], args.job, [pred], device=device
        )
    tokens_per_s, mfu = throughput(pred.config, pred.predicted_ns, device)
    if args.json:
        out = {
            "job": args.job,
            "base": est.base.to_dict(),
            **pred.to_dict(),
            "tokens_per_s": tokens_per_s,
            "mfu": mfu,
            "device": device.to_dict(),
        }
        print(json.dumps(out, indent=2))
        return 0
    lo, hi = pred.interval_ns
    print(f"predicted {_ms(pred.predicted_ns)}  interval [{_ms(lo)}, {_ms(hi)}]")
    for k, v in (pred.breakdown or {}).items():
        print(f"  {k:<14} {v if k == 'critical_stage' else _ms(v)}")
    if tokens_per_s is not None:
        note = mfu_note(device, mfu is not None)
        print(
            f"throughput {tokens_per_s:,.0f} tokens/s  MFU {'' if mfu is None else f'{mfu:.1%} '}{note}"
        )
    fits = {None: "unknown device memory", True: "fits", False: "DOES NOT FIT"}[pred.fits]
    print(f"memory per rank {pred.memory_bytes / 2**20:.1f} MiB: {fits}")
    for w in pred.warnings:
        print(f"warning: {w}")
    return 0


def _whatif(args: argparse.Namespace, speed: dict[str, float], why: str) -> int:
    """Speed-ups on the step graph of a job whose model the estimator does not read."""
    from lumos.estimate.gpu_step import GpuStepError
    from lumos.estimate.gpu_whatif import whatif

    try:
        w = whatif(args.warehouse, args.job, speed, why)
    except (GpuStepError, LookupError) as exc:
        print(f"lumos estimate: {why}; and its step graph: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(w.to_dict(), indent=2))
        return 0
    print(f"predicted {_ms(w.predicted_ns)}  (rank {w.rank}'s step as it ran: {_ms(w.base_ns)})")
    for k, v in w.breakdown.items():
        print(f"  {k:<22} {_ms(v)}")
    for warning in w.warnings:
        print(f"warning: {warning}")
    return 0


def _say(what: str) -> None:
    print(f"lumos estimate: {what}...", file=sys.stderr, flush=True)
