"""`lumos export` (issue 3 item 6): the replayed step as Chrome-trace JSON that Perfetto opens.

Uses the explain tests' session warehouse (bundled nccl_a100 and dlrm_8rank, a tiny trace).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest
from test_explain import build_explain_wh

from lumos.cli import main


@pytest.fixture(scope="module")
def explain_wh(examples: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_explain_wh(examples, tmp_path_factory)


def _export(wh: Path, tmp_path: Path, job: str, rank: int, step: int, mode: str) -> dict:
    out = tmp_path / f"{job}-{rank}-{step}-{mode}.json.gz"
    argv = ["export", "--job", job, "--rank", str(rank), "--step", str(step), "--mode", mode]
    assert main([*argv, "--out", str(out), "--warehouse", str(wh)]) == 0
    with gzip.open(out, "rb") as f:
        return json.loads(f.read())


def _step_tasks(wh: Path, job: str, rank: int, step: int) -> list[tuple]:
    """The step's tasks, by the rule written out again here: CPU tasks starting in the step's
    [CPU start, next step start) (last step: CPU end), GPU tasks whose launch is such a task."""
    con = duckdb.connect()
    try:
        return con.execute(
            f"""
            WITH t AS (SELECT * FROM read_parquet('{wh}/tasks/job={job}/*.parquet')
                       WHERE rank = $rank),
                 i AS (SELECT * FROM read_parquet('{wh}/iterations/job={job}/*.parquet')
                       WHERE rank = $rank AND step = $step),
                 cpu AS (SELECT t.* FROM t, i WHERE NOT t.is_gpu
                         AND t.ts_ns + t.origin_ns >= i.cpu_start_ns
                         AND t.ts_ns + t.origin_ns < coalesce(i.next_start_ns, i.cpu_end_ns))
            SELECT task, is_gpu, pid, tid, device, stream FROM cpu
            UNION ALL
            SELECT t.task, t.is_gpu, t.pid, t.tid, t.device, t.stream FROM t
            WHERE t.is_gpu AND t.launch_src IN (SELECT task FROM cpu)
            """,  # noqa: S608
            {"rank": rank, "step": step},
        ).fetchall()
    finally:
        con.close()


@pytest.mark.parametrize(
    ("job", "rank", "step", "mode"),
    [
        ("nccl", 0, 5, "model"),
        ("nccl", 0, 6, "identity"),
        ("dlrm", 3, 10, "model"),
        ("tiny", 0, 1, "measured"),
    ],
)
def test_export_is_valid_chrome_trace(
    explain_wh: Path,
    tmp_path: Path,
    job: str,
    rank: int,
    step: int,
    mode: str,
) -> None:
    trace = _export(explain_wh, tmp_path, job, rank, step, mode)
    ev = trace["traceEvents"]
    assert isinstance(ev, list) and all({"ph", "pid"} <= set(e) for e in ev)
    xs = [e for e in ev if e["ph"] == "X"]
    expected = _step_tasks(explain_wh, job, rank, step)
    assert len(xs) == len(expected) > 0
    assert sorted(e["args"]["task"] for e in xs) == sorted(r[0] for r in expected)

    # one named track per CPU thread and per GPU stream of the step
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    procs = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    want_threads = {f"thread {r[3]}" for r in expected if not r[1]}
    want_streams = {f"stream {r[5]}" for r in expected if r[1]}
    assert sorted(names.values()) == sorted(want_threads | want_streams)
    assert {(e["pid"], e["tid"]) for e in xs} == set(names)
    assert all(p in procs for p, _ in names)
    assert any("GPU" in n for n in procs.values()) and any("CPU" in n for n in procs.values())

    # processor exclusivity: X events of a track do not overlap (compared in whole ns)
    by_track: dict[tuple, list[tuple[int, int]]] = {}
    for e in xs:
        a = round(e["ts"] * 1000)
        by_track.setdefault((e["pid"], e["tid"]), []).append((a, a + round(e["dur"] * 1000)))
        assert e["dur"] >= 0
        assert {"measured_ts_us", "measured_dur_us", "start_offset_ns"} <= set(e["args"])
    for spans in by_track.values():
        spans.sort()
        for (_, e1), (s2, _) in zip(spans, spans[1:], strict=False):
            assert s2 >= e1

    # every flow has one start and one end (bound to the enclosing slice), ids unique
    starts = {e["id"]: e for e in ev if e["ph"] == "s"}
    ends = {e["id"]: e for e in ev if e["ph"] == "f"}
    assert len(starts) == sum(e["ph"] == "s" for e in ev)
    assert set(starts) == set(ends)
    assert all(e["bp"] == "e" for e in ends.values())
    if mode == "measured":
        return
    for e in xs:  # replayed minus measured start, as stored
        a = e["args"]
        assert a["start_offset_ns"] == round(e["ts"] * 1000) - round(a["measured_ts_us"] * 1000)


def test_export_flows_are_the_step_dependencies(explain_wh: Path, tmp_path: Path) -> None:
    trace = _export(explain_wh, tmp_path, "tiny", 0, 1, "model")
    flows = sorted(e["name"] for e in trace["traceEvents"] if e["ph"] == "s")
    assert flows == ["launch"] * 4  # gemm, all-reduce, gemm2, memset


def test_export_bad_step_names_the_steps(
    explain_wh: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    out = tmp_path / "x.json.gz"
    argv = ["export", "--job", "nccl", "--rank", "0", "--step", "42", "--out", str(out)]
    assert main([*argv, "--warehouse", str(explain_wh)]) == 2
    assert "no task in step 42 (steps: [4, 5, 6])" in capsys.readouterr().err
    assert not out.exists()
    argv = ["export", "--job", "nccl", "--rank", "9", "--step", "5", "--out", str(out)]
    assert main([*argv, "--warehouse", str(explain_wh)]) == 2
    assert "no rank 9" in capsys.readouterr().err
