"""The estimator's template holds CPU operators only. On a GPU job those are launches and waits,
so `lumos describe` and every estimate warn when the traced step's GPUs are busy a large share
of it, with the share measured from the trace. Checked against the share computed here from the
raw JSON (the union of GPU intervals inside each CPU ProfilerStep span)."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def _busy_share(path: Path) -> float:
    with gzip.open(path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [
        (float(e["ts"]), float(e["ts"]) + float(e["dur"]))
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#") and float(e.get("dur", 0)) > 0
    ]
    gpu = sorted(
        (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)))
        for e in events
        if e.get("cat") in GPU_CATS
    )
    shares = []
    for s0, s1 in steps:
        busy, reach = 0.0, s0
        for a, b in gpu:
            a, b = max(a, s0, reach), min(b, s1)
            if b > a:
                busy += b - a
                reach = b
        shares.append(busy / (s1 - s0))
    return statistics.median(shares)


@pytest.mark.parametrize("folder", ["hta/ns_resolution_trace", "hta/trace_diff/control"])
def test_a_gpu_bound_step_is_warned_with_its_measured_share(shared_traces, tmp_path, folder):
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base
    from warehouse.ingest import ingest

    (path,) = (shared_traces / folder).glob("*.json.gz")
    ingest([path], warehouse=tmp_path / "wh", job="gpu")
    warned = [
        w
        for w in infer_base(Warehouse.open(tmp_path / "wh"), "gpu").warnings
        if "GPUs are busy" in w
    ]
    assert len(warned) == 1, warned
    said = int(re.search(r"busy (\d+)% of the traced step", warned[0]).group(1))
    assert abs(said - 100 * _busy_share(path)) <= 1.0, (said, _busy_share(path))


def test_a_cpu_job_is_not_warned(tmp_path):
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base
    from warehouse.ingest import ingest

    corpus = Path(__file__).parent / "data" / "corpus" / "base"
    ingest([corpus], warehouse=tmp_path / "wh", job="cpu")
    warnings = infer_base(Warehouse.open(tmp_path / "wh"), "cpu").warnings
    assert not [w for w in warnings if "GPUs are busy" in w], warnings
