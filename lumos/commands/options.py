"""Options several sub-commands share, defined once so their help says the same thing."""

from __future__ import annotations

import argparse
from typing import Any

WAREHOUSE_HELP = "warehouse directory (default: $LUMOS_WAREHOUSE, else ./lumos_warehouse)"


def add_warehouse(p: argparse.ArgumentParser, **kw: Any) -> None:
    """`--warehouse DIR`; None when not given (lumos.api / warehouse.layout resolve the
    default)."""
    p.add_argument("--warehouse", default=None, metavar="DIR", help=WAREHOUSE_HELP, **kw)
