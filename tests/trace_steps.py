"""Reading ground-truth traces back with the standard json module, independently of lumos: the
tests of the trainer and of the checked-in corpus compare `measured.json` with what they find."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def read_trace(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    assert isinstance(doc["traceEvents"], list), path
    return doc


def profiler_steps(path: Path) -> dict[int, tuple[int, int]]:
    """ProfilerStep n -> (span, idle head + tail): the time inside the span before its main
    thread's first op starts and after its last op ends, in ns."""
    doc = read_trace(path)
    out = {}
    for st in doc["traceEvents"]:
        if st.get("ph") != "X" or not str(st.get("name", "")).startswith("ProfilerStep#"):
            continue
        a, b = float(st["ts"]), float(st["ts"]) + float(st["dur"])
        inner = [
            (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
            for e in doc["traceEvents"]
            if e.get("ph") == "X"
            and e.get("tid") == st["tid"]
            and e is not st
            and a <= float(e["ts"]) <= b
        ]
        idle = min(s for s, _ in inner) - a + b - max(t for _, t in inner)
        out[int(st["name"].split("#")[1])] = (round((b - a) * 1000), round(idle * 1000))
    return out


def check_measured(job: Path, slack_ns: int = 50_000) -> dict:
    """Assert a job folder's `measured.json` agrees with the ProfilerStep spans of the traces
    beside it: each rank's span is the one recorded, the step timer's wall time lies inside the
    span up to its idle head and tail, and the spread is that of the steps. Returns the doc."""
    measured = json.loads((job / "measured.json").read_text())
    assert len(measured["traced"]["steps"]) == measured["control"]["repeat"], job
    spans = {}
    for step in measured["traced"]["steps"]:
        for r in step["ranks"]:
            trace = job / r["trace"]
            if trace not in spans:
                spans[trace] = profiler_steps(trace)
            span, idle = spans[trace][r["profiler_step"]]
            assert r["profiler_step_span_ns"] == span, (job, r)
            assert -slack_ns <= span - r["wall_ns"] <= idle + slack_ns, (job, r)
        assert step["wall_ns"] == max(r["wall_ns"] for r in step["ranks"]), job
    spread = measured["traced"]["step"]
    walls = sorted(s["wall_ns"] for s in measured["traced"]["steps"])
    assert spread["min"] == walls[0] and spread["max"] == walls[-1], job
    assert spread["median"] == walls[len(walls) // 2] or len(walls) % 2 == 0, job
    return measured
