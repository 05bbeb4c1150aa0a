"""The `lumos` command line.

Each sub-command lives in its own module under `lumos.commands` and exposes
`register(subparsers) -> None`, which adds its parser and sets `func` on it. Modules are imported
here, but heavy libraries (duckdb, dagster, numba, torch) are imported inside the command functions,
so `lumos --help` and quick commands start fast.
"""

from __future__ import annotations

import argparse
import errno
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from lumos.process_exit import exit_now
from warehouse.location import WarehouseLocationError

_REFUSED_BY_THE_MACHINE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT}

# Order is the order shown in `lumos --help`.
COMMAND_MODULES = [
    "lumos.commands.ingest",
    "lumos.commands.sql",
    "lumos.commands.status",
    "lumos.commands.migrate",
    "lumos.commands.groundtruth",
    "lumos.commands.opbench",
    "lumos.commands.opmodel",
    "lumos.commands.replay",
    "lumos.commands.explain",
    "lumos.commands.export",
    "lumos.commands.describe",
    "lumos.commands.estimate",
    "lumos.commands.sweep",
    "lumos.commands.report",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lumos",
        description="A warehouse of PyTorch profiler traces that replays and predicts training "
        "iterations.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # a command not built yet
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # numpy's OpenBLAS starts a spinning thread per core; nothing here runs a large BLAS call, and
    # the spin cost 6% of an ingest's CPU. Set before numpy is imported (the commands import it).
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    # Importing numba, pyarrow and duckdb allocates ~10^6 objects and no cycles worth collecting:
    # the collector's passes over them cost ~0.1 s of every command's start.
    gc.set_threshold(100_000, 50, 100)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `lumos sql ... | head`: the reader left; point stdout at devnull so the interpreter's
        # final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except WarehouseLocationError as exc:
        print(f"lumos {args.command}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        # the machine refusing a path (a warehouse this user cannot write, a read-only mount, a
        # full disk): one line naming the path, not a traceback; other OS errors are bugs
        if exc.errno not in _REFUSED_BY_THE_MACHINE or exc.filename is None:
            raise
        print(f"lumos {args.command}: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    except Exception as exc:
        # DuckDB's errors (a damaged Parquet file in the warehouse, a bad query) name the file or
        # the problem themselves: one line, not a traceback
        if type(exc).__module__.split(".")[0] not in ("duckdb", "_duckdb"):
            raise
        print(f"lumos {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def entry() -> NoReturn:
    """The console script (and `python -m lumos`): `main`, then the process ends without the
    interpreter's teardown (`lumos.process_exit`). `main` itself returns, for callers in-process."""
    exit_now(main())


if __name__ == "__main__":
    entry()
