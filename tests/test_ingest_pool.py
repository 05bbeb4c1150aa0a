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


def _children(pid: int) -> set[int]:
    """Live child processes of `pid` (Linux /proc)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            continue
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


_POOL_PARENT = """
import sys, time
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from warehouse.ingest_process import prepare_ingest_worker
from lumos.replay.fleet import _init_worker

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    init, args = (prepare_ingest_worker, ()) if sys.argv[1] == "ingest" else (_init_worker, (sys.argv[2], 1))
    with ProcessPoolExecutor(2, mp_context=ctx, initializer=init, initargs=args) as pool:
        futs = [pool.submit(time.sleep, 600) for _ in range(2)]
        time.sleep(0.5)
        print("ready", flush=True)
        time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
@pytest.mark.parametrize("pool", ["ingest", "replay"])
def test_pool_workers_end_with_a_killed_parent(pool: str, tmp_path: Path, examples: Path) -> None:
    """Issue 34, item 4: kill -9 of a process whose pool works (the ingest's parse workers, the
    fleet replay's workers, with their own initializers) leaves no worker behind."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.cli_run import ROOT

    catalog = ""
    if pool == "replay":  # its workers open the catalog first
        wh = tmp_path / "wh"
        ingest([examples / "nccl_a100"], warehouse=wh)
        catalog = str(wh / "lumos.duckdb")
    script = tmp_path / "parent.py"
    script.write_text(_POOL_PARENT)
    proc = subprocess.Popen(
        [sys.executable, str(script), pool, catalog],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 60
        workers: set[int] = set()
        while time.monotonic() < deadline and len(workers) < 2:
            workers = {c for c in _children(proc.pid) if _alive(c)}
            time.sleep(0.05)
        assert len(workers) >= 2, workers
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(_alive(w) for w in workers):
            time.sleep(0.1)
        assert not [w for w in workers if _alive(w)], "workers outlived their killed parent"
    finally:
        if proc.poll() is None:
            proc.kill()
        for w in _children(proc.pid):
            os.kill(w, signal.SIGKILL)
