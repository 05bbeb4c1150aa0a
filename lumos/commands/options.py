"""Options several sub-commands share, defined once so their help says the same thing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

WAREHOUSE_HELP = (
    "warehouse directory (default: $LUMOS_WAREHOUSE, else ./lumos_warehouse); every command but "
    "groundtruth, opmodel and opbench also takes s3://bucket/prefix"
)


def add_warehouse(p: argparse.ArgumentParser, **kw: Any) -> None:
    """`--warehouse DIR`; None when not given (lumos.api / warehouse.layout resolve the
    default). `type=Path`: a command that needs a local directory (a URI is refused by name:
    `Path("s3://b/wh")` would be the local folder `s3:/b/wh`)."""
    if kw.get("type") is Path:
        kw["type"] = _local_directory
    p.add_argument("--warehouse", default=None, metavar="DIR", help=WAREHOUSE_HELP, **kw)


def _local_directory(text: str) -> Path:
    from warehouse.location import WarehouseLocationError, local_warehouse

    try:
        return local_warehouse(text)
    except WarehouseLocationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_host_cores(p: argparse.ArgumentParser) -> None:
    """`--host-cores N`: the CPU cores the base's ranks shared (ranks beyond them time-share)."""
    p.add_argument(
        "--host-cores",
        type=_positive_int,
        default=None,
        metavar="N",
        help="CPU cores of the host the base ran on: target worlds beyond them time-share the "
        "cores (default: a grid file's host_cores, else what `lumos groundtruth` recorded in "
        "the trace, else the host prior's when the warehouse has no multi-rank job, else "
        "unknown)",
    )


def _whole(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def _positive_int(text: str) -> int:
    return _whole(text, 1, "a positive whole number")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    return _whole(text, 0, "a whole number >= 0")


def job_name(text: str) -> str:
    """An argparse type for `--job`: a name that is not empty or blank (the warehouse cannot
    store one, and `--job ""` is more often a shell variable that was never set)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a job name cannot be empty")
    return text
