"""Keeps pandas out of processes that never hold a pandas object: the `lumos ingest` command and
its parse workers.

pyarrow imports pandas (when installed) on its first conversion of almost anything (`pa.array`
of a list or a numpy array, a scalar, `Table.from_pylist`) to check whether the object is a
pandas one: a fifth of a small ingest's CPU (docs/warehouse.md, "Module notes"). pandas is
optional to pyarrow, and with it unimportable pyarrow takes its pandas-free paths. A finder at the head of
`sys.meta_path` makes it unimportable for the rest of the process, so this is only for
processes that are known not to use pandas; the Python API and Dagster are left alone.
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder

__all__ = ["block_pandas"]


class _NoPandas(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201 (importlib's API)
        if name == "pandas" or name.startswith("pandas."):
            raise ModuleNotFoundError(
                f"No module named {name!r} (lumos keeps pandas out of this process: "
                "warehouse.no_pandas)",
                name=name,
            )
        return None


def block_pandas() -> bool:
    """Make pandas unimportable in this process, unless it is imported already (then nothing is
    done). Idempotent; returns whether pandas is now blocked."""
    if "pandas" in sys.modules:
        return False
    if not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())
    return True
