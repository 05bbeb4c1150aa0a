"""The process pool of `ingest(workers=N)`: only started when the files hold enough JSON to pay
for the workers' start-up, and, when started, giving the same warehouse as parsing inline.

Expected counts come from the standard `json` module, never from the reader.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import warehouse.ingest as ingest_module
from warehouse.ingest import POOL_BYTES_PER_WORKER, _pool_size, ingest

DLRM = "dlrm_8rank"


def _files(examples: Path) -> list[Path]:
    return sorted((examples / DLRM).glob("*.json.gz"))


def test_small_jobs_are_parsed_without_a_pool(examples: Path) -> None:
    files = _files(examples)
    sizes = [f.stat().st_size for f in files]
    assert _pool_size(8, files, sizes) == 1
    assert _pool_size(1, files, [POOL_BYTES_PER_WORKER] * len(files)) == 1


def test_big_jobs_get_one_worker_per_share_of_json(examples: Path) -> None:
    files = _files(examples)
    big = [POOL_BYTES_PER_WORKER] * len(files)  # gzip'd: ~10x that much JSON each
    assert _pool_size(4, files, big) == 4
    assert _pool_size(64, files, big) == len(files)


def test_pool_and_inline_give_the_same_events(
    examples: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _files(examples)
    expected = {
        f.name: len(json.loads(gzip.decompress(f.read_bytes()))["traceEvents"]) for f in files
    }
    monkeypatch.setattr(ingest_module, "POOL_BYTES_PER_WORKER", 1)  # force the pool
    assert _pool_size(2, files, [f.stat().st_size for f in files]) == 2
    pooled = ingest(files, warehouse=tmp_path / "pool", job="dlrm", workers=2)
    monkeypatch.undo()
    inline = ingest(files, warehouse=tmp_path / "inline", job="dlrm", workers=2)
    for report in (pooled, inline):
        assert not report.refused
        assert {Path(f.path).name: f.n_events for f in report.files} == expected
        assert sorted(f.rank for f in report.files) == list(range(len(files)))

    def rows(wh: Path) -> list[dict]:
        files = sorted((wh / "events").rglob("job=*/rank=*/*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files])
        return (
            table.group_by("rank")
            .aggregate([("ts_ns", "sum"), ("ts_ns", "count"), ("name", "count_distinct")])
            .sort_by("rank")
            .to_pylist()
        )

    assert rows(tmp_path / "pool") == rows(tmp_path / "inline")
