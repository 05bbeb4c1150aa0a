"""Nothing lost, nothing half-written: idempotency, concurrent ingests and killed ingests, with
real `lumos ingest` processes on real files."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from warehouse_checks import assert_clean, assert_consistent, manifest_rows, query, snapshot

ROOT = Path(__file__).resolve().parent.parent


def lumos(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "lumos", *args],
        cwd=kw.pop("cwd", ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def run(*args: str) -> subprocess.CompletedProcess:
    p = lumos(*args)
    out, err = p.communicate(timeout=300)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def test_second_ingest_writes_nothing(examples: Path, warehouse_dir: Path) -> None:
    first = run("ingest", str(examples), "--warehouse", str(warehouse_dir))
    assert first.returncode == 0, first.stderr
    before = snapshot(warehouse_dir)
    time.sleep(0.05)  # a rewrite would show in the mtimes
    second = run("ingest", str(examples), "--warehouse", str(warehouse_dir))
    assert second.returncode == 0, second.stderr
    # 8 dlrm_8rank ranks + nccl_a100 + gpt_cpu (examples/traces/README.md)
    assert "10 unchanged" in second.stdout and "0 ingested" in second.stdout
    assert snapshot(warehouse_dir) == before


def test_two_processes_ingesting_the_same_directory(examples: Path, warehouse_dir: Path) -> None:
    procs = [lumos("ingest", str(examples), "--warehouse", str(warehouse_dir)) for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    rows = manifest_rows(warehouse_dir)
    # one row per trace (8 dlrm_8rank + nccl_a100 + gpt_cpu): the loser of each race wrote nothing
    assert len(rows) == 10
    assert sorted(Counter((r["job"], r["rank"]) for r in rows).values()) == [1] * 10
    assert assert_consistent(warehouse_dir) == 10
    assert_clean(warehouse_dir)
    # the events of each file match an independent count
    for f in (examples / "dlrm_8rank").glob("*.json.gz"):
        n = len(json.loads(gzip.decompress(f.read_bytes()))["traceEvents"])
        [(got,)] = query(
            warehouse_dir,
            f"select count(*) from events e join traces t on e.trace_sha256 = t.sha256 where t.path = '{f}'",
        )
        assert got == n


@pytest.fixture()
def big_input(examples: Path, tmp_path: Path) -> Path:
    """Six jobs of one rank each, plus one trace with 6x the events (a longer parse)."""
    src = examples / "nccl_a100" / "nccl_data.json.gz"
    root = tmp_path / "many"
    for k in range(6):
        (root / f"job{k}").mkdir(parents=True)
        shutil.copy(src, root / f"job{k}" / "nccl_data.json.gz")
    data = json.loads(gzip.decompress(src.read_bytes()))
    data["traceEvents"] = data["traceEvents"] * 6
    (root / "jobbig").mkdir()
    (root / "jobbig" / "big.json").write_text(json.dumps(data))
    return root


def _parsing(wh: Path) -> bool:
    return any((wh / "_staging").glob("run-*/*.events.parquet"))


def _first_commit(wh: Path) -> bool:
    return any((wh / "manifest").glob("part-*.parquet"))


def _parsing_big(wh: Path) -> bool:
    # files are staged under their input index; the big file is the 7th input (jobbig sorts last)
    return any((wh / "_staging").glob("run-*/000006.events.parquet"))


@pytest.mark.parametrize("moment", [_parsing, _first_commit, _parsing_big])
def test_killed_ingest_leaves_no_partial_rows(big_input: Path, warehouse_dir: Path, moment) -> None:
    p = lumos("ingest", str(big_input), "--warehouse", str(warehouse_dir))
    deadline = time.monotonic() + 120
    while not moment(warehouse_dir):
        if p.poll() is not None:
            pytest.fail(f"ingest ended before the moment {moment.__name__}: {p.communicate()}")
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(p.pid, signal.SIGKILL)
    p.communicate()
    committed = assert_consistent(warehouse_dir)
    assert committed < 7
    again = run("ingest", str(big_input), "--warehouse", str(warehouse_dir))
    assert again.returncode == 0, again.stderr
    assert f"{committed} unchanged" in again.stdout
    assert assert_consistent(warehouse_dir) == 7
    assert_clean(warehouse_dir)
    [(n,)] = query(warehouse_dir, "select count(*) from events where job = 'many/jobbig'")
    [(m,)] = query(warehouse_dir, "select count(*) from events where job = 'many/job0'")
    assert n == 6 * m


def test_a_commit_killed_before_its_manifest_row_leaves_nothing(
    examples: Path, warehouse_dir: Path
) -> None:
    """A process that ends between renaming a trace's files into place and appending their
    manifest row (here it ends itself at that call, as a SIGKILL would): the views show none of
    it, and the next ingest deletes the files (the commit's journal names them) without walking
    the warehouse."""
    first = examples / "nccl_a100" / "nccl_data.json.gz"
    assert run("ingest", str(first), "--warehouse", str(warehouse_dir)).returncode == 0
    [(before,)] = query(warehouse_dir, "select count(*) from events")
    had = set((warehouse_dir / "events").rglob("*.parquet"))
    one = examples / "dlrm_8rank" / "worker2_step_12.1694128201554.pt.trace.json.gz"
    code = (
        "import os\nimport warehouse.ingest as ingest\n"
        "ingest.append_rows = lambda layout, rows: os._exit(9)\n"
        f"ingest.ingest([{str(one)!r}], warehouse={str(warehouse_dir)!r})\n"
    )
    killed = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert killed.returncode == 9, killed.stderr
    placed = sorted(set((warehouse_dir / "events").rglob("*.parquet")) - had)
    assert len(placed) == 1  # renamed into place, its manifest row never written
    assert (warehouse_dir / ".commit.journal").exists()
    [(n,)] = query(warehouse_dir, "select count(*) from events")
    assert n == before  # the placed file's rows are not visible
    other = examples / "dlrm_8rank" / "worker3_step_12.1694128201557.pt.trace.json.gz"
    assert other.exists()
    again = run("ingest", str(other), "--warehouse", str(warehouse_dir))
    assert again.returncode == 0, again.stderr
    assert not placed[0].exists()
    assert not (warehouse_dir / ".commit.journal").exists()
    assert_clean(warehouse_dir)


def _file_size_limit(limit: int):  # noqa: ANN202
    import resource

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_failing_parquet_write_refuses_the_file_and_keeps_the_rest(
    examples: Path, shared_traces: Path, warehouse_dir: Path
) -> None:
    """The Parquet writer runs in a thread several batches behind the reader: when it fails (here
    a 1 MiB file size limit, above the catalog's 0.5 MB, makes the events file's writes fail with
    EFBIG, as a full disk would), the error reaches the file's outcome as an internal error, which
    is retried next time, nothing of that file is left staged or visible, and the other files of
    the call are ingested."""
    big = shared_traces / "hta/df_index_resolver/df_index_resolver.json.gz"  # 1.6 MB of Parquet
    small = examples / "nccl_a100" / "nccl_data.json.gz"
    p = lumos(
        "ingest", str(small), str(big), "--warehouse", str(warehouse_dir),
        preexec_fn=_file_size_limit(1 << 20),
    )  # fmt: skip
    out, err = p.communicate(timeout=300)
    rows = {Path(r["path"]).name: r for r in manifest_rows(warehouse_dir)}
    assert rows[small.name]["status"] == "ok", (out, err)
    bad = rows[big.name]
    assert bad["status"] == "refused" and "internal error while reading" in bad["error"], bad
    assert "File too large" in bad["error"], bad["error"]
    assert not list((warehouse_dir / "_staging").rglob("*.parquet"))
    assert assert_consistent(warehouse_dir) == 1
    # without the limit the same call ingests it (internal errors are retried)
    again = run("ingest", str(small), str(big), "--warehouse", str(warehouse_dir))
    assert again.returncode == 0, again.stderr
    assert assert_consistent(warehouse_dir) == 2
