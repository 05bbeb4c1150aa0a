"""The real traces every replay test reads, ingested once per session into one warehouse
(`real_wh`), and each job's full replay computed once on first use (`replays`): the fixtures
are registered in conftest.py, so that any test module shares them instead of ingesting and
replaying a trace again.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest

from lumos.replay.collectives import build_collectives
from lumos.replay.run import replay_job
from warehouse.ingest import ingest

TRACES = {
    "nccl_data": "hta/nccl_parser_config/nccl_data.json.gz",
    "ns_res": "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "df_index": "hta/df_index_resolver/df_index_resolver.json.gz",
    "dlrm": "param/dlrm_8rank/kineto",
    "control": "hta/trace_diff/control/control.json.gz",
    "test": "hta/trace_diff/test/test.json.gz",
    "resnet": "kineto/resnet50_legacy_2021.pt.trace.json.gz",
}
SHIFT_US = {3: 37_500, 6: -12_345}  # known clock offsets written into two ranks' files


def _shifted_copy(src: Path, dst: Path, shift_us: int) -> Path:
    """`src` with every event timestamp moved by shift_us (a rank whose clock is off)."""
    with gzip.open(src, "rt") as f:
        doc = json.load(f)
    for ev in doc["traceEvents"]:
        if isinstance(ev.get("ts"), (int, float)):
            ev["ts"] += shift_us
    dst.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dst, "wt") as f:
        json.dump(doc, f)
    return dst


@pytest.fixture(scope="session")
def real_wh(shared_traces: Path, tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """(warehouse root, read-only catalog connection) holding every job of `TRACES` and
    `dlrm_shift` (the DLRM job with two ranks' clocks moved by `SHIFT_US`)."""
    root = tmp_path_factory.mktemp("replay_wh")
    wh = root / "wh"
    for job, rel in TRACES.items():
        ingest([shared_traces / rel], warehouse=wh, job=job, build_catalog=False)
    shifted = []
    for f in sorted((shared_traces / TRACES["dlrm"]).glob("*.json.gz")):
        r = next((r for r in SHIFT_US if f.name.startswith(f"worker{r}_")), None)
        shifted.append(_shifted_copy(f, root / "shift" / f.name, SHIFT_US.get(r, 0)))
    assert sum(f.name.startswith(("worker3_", "worker6_")) for f in shifted) == len(SHIFT_US)
    ingest(shifted, warehouse=wh, job="dlrm_shift")
    con = duckdb.connect(str(wh / "lumos.duckdb"), read_only=True)
    yield wh, con
    con.close()


@pytest.fixture(scope="session")
def replays(real_wh):  # noqa: ANN001, ANN201
    """Each job's replay in all modes, computed once per session on first use."""
    wh, con = real_wh
    cache: dict[str, object] = {}

    def get(job: str):  # noqa: ANN202
        if job not in cache:
            coll = build_collectives(wh, job, write=False) if job.startswith("dlrm") else None
            cache[job] = replay_job(con, job, collectives=coll)
        return cache[job]

    return get
