"""The `opbench` warehouse table: importing benchmark folders and reading them back.

    <wh>/opbench/device=<enc>/<file stem>.parquet   one file per imported CSV (schema OPBENCH)

`<enc>` is the device name escaped like a job name (`warehouse.layout.encode_job`). Each Parquet
file records the source CSV's sha256 in its key-value metadata, so importing the same data again
reads one footer per file and writes nothing. Writes go through a temporary file and a rename.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd

from lumos.opmodel import features as F
from lumos.opmodel.devices import opbench_dir
from lumos.opmodel.opbench import OpbenchError, OpbenchFile, find_files, read_file

__all__ = ["ImportResult", "import_dir", "load_rows", "opbench_dir"]

SHA_KEY = b"lumos.source_sha256"


@dataclass
class ImportResult:
    written: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    rows: int = 0


def _table(f: OpbenchFile, device: str, rel: str, now: datetime):
    import pyarrow as pa

    from warehouse.schema import OPBENCH, OPBENCH_SHAPE_COLUMNS

    n = len(f.rows)
    cols: dict[str, object] = {
        "device": [device] * n,
        "gpu": [f.gpu] * n,
        "operator": [f.operator] * n,
        "op_class": [F.op_class(f.operator)] * n,
        "precision": [f.precision] * n,
    }
    if {"nodes", "gpus_per_node"} <= set(f.rows.columns):
        cols["layout"] = [
            f"{int(a)}_{int(b)}"
            for a, b in zip(f.rows["nodes"], f.rows["gpus_per_node"], strict=True)
        ]
    else:
        cols["layout"] = [None] * n
    for c in [*OPBENCH_SHAPE_COLUMNS, "fwd_us", "bwd_us", "dur_us"]:
        cols[c] = f.rows[c].to_numpy(np.float64) if c in f.rows else np.full(n, np.nan)
    cols["source_file"] = [rel] * n
    cols["source_sha256"] = [f.sha256] * n
    cols["line"] = np.arange(2, n + 2, dtype=np.int64)
    cols["imported_at"] = [now] * n
    table = pa.Table.from_pydict(cols, schema=OPBENCH)
    return table.replace_schema_metadata({SHA_KEY: f.sha256.encode()})


def import_dir(directory: Path, device: str, warehouse: Path) -> ImportResult:
    """Read every benchmark CSV under `directory` and store it for `device`.

    All files are read and validated before anything is written: one bad file (an OpbenchError
    naming it) leaves the warehouse as it was.
    """
    import pyarrow.parquet as pq

    from warehouse.layout import write_parquet_atomic

    if not device.strip():
        raise ValueError("the device name cannot be empty")
    directory = Path(directory)
    paths = find_files(directory)
    if not paths:
        raise OpbenchError(directory, "no benchmark CSV files (<GPU>_<operator>_<precision>.csv)")
    files = [read_file(p) for p in paths]
    stems = [p.stem for p in paths]
    dupes = {s for s in stems if stems.count(s) > 1}
    if dupes:
        raise OpbenchError(directory, f"two files share the name(s) {sorted(dupes)}")

    out = opbench_dir(warehouse, device)
    result = ImportResult()
    now = datetime.now(UTC)
    for path, f in zip(paths, files, strict=True):
        target = out / f"{path.stem}.parquet"
        rel = path.relative_to(directory).as_posix()
        result.rows += len(f.rows)
        if target.exists():
            meta = pq.read_schema(target).metadata or {}
            if meta.get(SHA_KEY) == f.sha256.encode():
                result.unchanged.append(rel)
                continue
        write_parquet_atomic(_table(f, device, rel, now), target)
        result.written.append(rel)
    return result


def load_rows(warehouse: Path, device: str, operator: str | None = None) -> pd.DataFrame:
    """A device's benchmark rows (optionally one operator's), exact duplicates dropped.

    The estimator ships each collective both per layout and as one combined file with the same
    rows; counting them twice would weight those layouts double.
    """
    import pyarrow.dataset as ds

    directory = opbench_dir(warehouse, device)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"{warehouse}: no opbench data for device {device!r} "
            f"(run `lumos opbench import DIR --device {device}`)"
        )
    dataset = ds.dataset(sorted(directory.glob("*.parquet")), format="parquet")
    filt = ds.field("operator") == operator if operator else None
    df = dataset.to_table(filter=filt).to_pandas()
    from warehouse.schema import OPBENCH_SHAPE_COLUMNS

    key = ["operator", "precision", "layout", *OPBENCH_SHAPE_COLUMNS, "fwd_us", "bwd_us", "dur_us"]
    return df.drop_duplicates(subset=key).reset_index(drop=True)
