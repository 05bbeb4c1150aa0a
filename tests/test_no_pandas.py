"""pandas is kept out of the `lumos ingest` process (warehouse.no_pandas): pyarrow's probe for
pandas objects would import it, 0.2 s of every ingest. So is pyarrow.compute (0.05 s to import):
the reader's per-chunk work is numba over the columns in place. Each case runs in a fresh
interpreter, since the test process itself has pandas imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.cli_run import ROOT


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_the_ingest_command_runs_without_pandas(examples: Path, tmp_path: Path) -> None:
    code = f"""
import sys
from lumos.cli import main
rc = main(["ingest", {str(examples / "dlrm_8rank")!r}, "--warehouse", {str(tmp_path)!r}, "-q"])
print(rc, "pandas" in sys.modules, "pyarrow.compute" in sys.modules)
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-3:] == ["0", "False", "False"]
    assert len(list((tmp_path / "events").rglob("rank=*/*.parquet"))) == 8


def test_pyarrow_works_with_pandas_blocked() -> None:
    code = """
import sys
from warehouse.no_pandas import block_pandas
assert block_pandas() and block_pandas()
import numpy as np, pyarrow as pa
t = pa.Table.from_pylist([{"a": 1, "b": "x"}, {"a": None, "b": "y"}])
assert pa.array(np.arange(3)).to_pylist() == [0, 1, 2] and t.column("a").null_count == 1
assert "pandas" not in sys.modules
try:
    import pandas
except ModuleNotFoundError as exc:
    print("refused:", exc)
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert "refused: No module named 'pandas' (lumos keeps pandas out" in out.stdout


def test_nothing_is_blocked_once_pandas_is_imported() -> None:
    out = _python(
        "import pandas\nfrom warehouse.no_pandas import block_pandas\n"
        "print(block_pandas())\nimport pandas.api.types\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_an_ingest_into_a_current_warehouse_needs_no_duckdb(examples: Path, tmp_path: Path) -> None:
    """The catalog's stamp says it is current: the ingest process never imports DuckDB (0.07 s),
    and its Arrow allocations share the reader's allocator (warehouse.ingest_process)."""
    made = _python(
        f"from warehouse.catalog import build_catalog\nbuild_catalog({str(tmp_path)!r})\n"
    )
    assert made.returncode == 0, made.stderr
    code = f"""
import sys
import pyarrow as pa
from lumos.cli import main
rc = main(["ingest", {str(examples / "dlrm_8rank")!r}, "--warehouse", {str(tmp_path)!r}, "-q"])
print(rc, "duckdb" in sys.modules, pa.default_memory_pool().backend_name)
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-3:] == ["0", "False", "system"]
    assert len(list((tmp_path / "events").rglob("rank=*/*.parquet"))) == 8


def test_building_a_new_warehouses_catalog_does_not_import_pandas(tmp_path: Path) -> None:
    """Without the ingest process's block: the empty `_schema.parquet` files were made by
    `Schema.empty_table`, which imports pandas (0.28 s of a first `lumos sql` or Dagster run)."""
    code = f"""
import sys
from warehouse.catalog import build_catalog
build_catalog({str(tmp_path / "wh")!r})
print("pandas" in sys.modules)
"""
    out = _python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == "False"
    assert (tmp_path / "wh" / "events" / "_schema.parquet").is_file()
