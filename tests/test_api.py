"""The notebook API on a real warehouse."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from lumos.api import Warehouse, WarehouseNotFound


def test_open_missing_raises(tmp_path: Path) -> None:
    with pytest.raises(WarehouseNotFound, match="no lumos warehouse"):
        Warehouse.open(tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


def test_ingest_query_status_and_move(examples: Path, tmp_path: Path) -> None:
    wh = Warehouse.open(tmp_path / "wh", create=True)
    trace = examples / "nccl_a100" / "nccl_data.json.gz"
    report = wh.ingest([trace], job="nccl")
    assert [f.status for f in report.files] == ["ok"]

    raw = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    df = wh.sql("select * from events order by event_idx")
    assert isinstance(df, pd.DataFrame) and len(df) == len(raw)
    # ns timestamps exact: the JSON's microsecond text times 1000 (integral here)
    first_x = next(i for i, e in enumerate(raw) if e.get("ph") == "X")
    ts_text = repr(raw[first_x]["ts"])
    whole, _, frac = ts_text.partition(".")
    expected_ns = int(whole) * 1000 + int((frac + "000")[:3])
    assert df.loc[df.event_idx == first_x, "ts_ns"].item() == expected_ns
    assert str(df["correlation"].dtype) == "Int64"  # nulls do not turn ints into floats

    table = wh.arrow("select job, rank, count(*) as n from events group by all")
    assert isinstance(table, pa.Table) and table.to_pylist() == [
        {"job": "nccl", "rank": 0, "n": len(raw)}
    ]
    status = wh.status()
    assert status["totals"]["files_ok"] == 1 and status["totals"]["events"] == len(raw)
    assert status["jobs"].loc[0, "job"] == "nccl"

    # a moved warehouse: open() notices and rebuilds the catalog's absolute paths
    moved = tmp_path / "moved"
    shutil.move(wh.root, moved)
    wh2 = Warehouse.open(moved)
    assert wh2.arrow("select count(*) as n from events").to_pylist() == [{"n": len(raw)}]
