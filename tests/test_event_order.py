"""A trace's events may come in any order (Kineto appends GPU activity after the CPU events, merge
tools concatenate, other writers sort differently): the graph, the replay and the explanation of
a real trace must not depend on the order of `traceEvents` in the file.

The A100 trace `trace_diff/control` (4 streams, SendRecv and AllReduce, 6 steps) is ingested as it
is, shuffled and reversed, each as its own job, and every job's replay must be the same.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import duckdb
import pytest

from lumos.explain.inputs import from_tables
from lumos.explain.run import explain
from lumos.replay.run import replay_job
from warehouse.ingest import ingest

ORDERS = ("as_written", "shuffled", "reversed")


@pytest.fixture(scope="module")
def replays(shared_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("order")
    trace = json.loads(gzip.open(shared_traces / "hta/trace_diff/control/control.json.gz").read())
    events = trace["traceEvents"]
    wh = root / "wh"
    for order in ORDERS:
        ev = list(events)
        if order == "shuffled":
            random.Random(7).shuffle(ev)
        elif order == "reversed":
            ev.reverse()
        path = root / order / "trace.json"
        path.parent.mkdir()
        path.write_text(json.dumps({**trace, "traceEvents": ev}))
        ingest([path], warehouse=wh, job=order)
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    try:
        yield {order: replay_job(con, order) for order in ORDERS}
    finally:
        con.close()


def _rows(table, drop: tuple[str, ...] = ("job",)) -> list[dict]:  # noqa: ANN001
    return [{k: v for k, v in r.items() if k not in drop} for r in table.to_pylist()]


def _timeline(tables: dict) -> list[tuple]:
    """Every task with its replayed times, in time order. Task ids are not compared: tasks that
    start together on one processor (two zero-length runtime calls in the same microsecond) are
    numbered in the file's order, the only order the trace gives them; so is the name of an op
    that starts and ends with its child (`aten::to` and its `aten::_to_copy`)."""
    keys = ("proc", "role", "kind", "ts_ns", "dur_ns", "model_dur_ns", "gap_ns", "rt_mode")
    tasks = tables["tasks"].to_pylist()
    out = []
    for s in tables["schedules"].to_pylist():
        t = tasks[s["task"]]
        out.append((s["mode"], *(t[k] for k in keys), s["start_ns"], s["end_ns"], s["crit_kind"]))
    return sorted(out, key=lambda r: tuple(-1 if v is None else v for v in r[1:]) + (r[0],))


@pytest.mark.parametrize("order", ORDERS[1:])
def test_replay_does_not_depend_on_event_order(replays: dict, order: str) -> None:
    ref, got = replays["as_written"].tables, replays[order].tables
    assert ref["iteration_replay"].num_rows >= 15  # 6 steps x cpu_step / gpu_span, 5 periods
    for name in ("iterations", "iteration_replay", "replay_quality", "kernels"):
        assert _rows(got[name]) == _rows(ref[name]), name
    assert _timeline(got) == _timeline(ref)
    names = [
        (a["name"], b["name"])
        for a, b in zip(ref["tasks"].to_pylist(), got["tasks"].to_pylist(), strict=True)
    ]
    differ = sum(a != b for a, b in names)
    assert differ <= len(names) // 100, f"{differ} of {len(names)} task names differ"


def test_explanations_do_not_depend_on_event_order(replays: dict) -> None:
    ref = explain(from_tables("as_written", replays["as_written"].tables))
    for order in ORDERS[1:]:
        got = explain(from_tables(order, replays[order].tables))
        for name in ("breakdown", "sm_utilization", "critical_path_summary"):
            assert _rows(got[name]) == _rows(ref[name]), (order, name)
