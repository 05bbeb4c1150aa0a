"""Replay and estimate on an S3 warehouse against a local one, measured (issue 38).

    .venv/bin/python bench/lake_replay.py [--repeats 3]

The bundled dlrm_8rank (8 ranks, collectives), gpt_cpu and nccl_a100 traces are ingested into a
fresh local warehouse and a prefix of moto's S3 server on 127.0.0.1 (in-process, numba warm),
then, --repeats times each, medians and the S3/local ratio of: (a) `replay_fleet(force=True)`
of every job (on S3: the local mirror made, the replay, its files committed); (b) the same with
nothing to do (every job current: the mirror and the skip); (c) one estimate of gpt_cpu
(`lumos.commands.estimate`'s path: `Estimator.open` with its template cached, `explain`), on S3
inside `local_warehouse_for` (the mirror, then nothing to commit). Defaults take ~1 minute.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from lake_ingest import BUCKET, EXAMPLES, _s3  # noqa: E402

from warehouse.ingest import ingest  # noqa: E402

JOBS = ("dlrm_8rank", "gpt_cpu", "nccl_a100")


def _median(fn: Callable[[], object], repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls)


def _estimate(warehouse: str) -> None:
    from lumos.estimate.estimator import Estimator
    from warehouse.lake_local import local_warehouse_for

    with local_warehouse_for(warehouse) as local:
        est = Estimator.open(local, "gpt_cpu", {})
        est.explain(est.target({"layers": 4, "dp": 2}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="lumos-bench-lake-replay-"))
    os.environ["LUMOS_CACHE"] = str(scratch / "cache")
    server = _s3()
    try:
        from lumos.replay.fleet import replay_fleet

        where = {"local": str(scratch / "local"), "S3": f"s3://{BUCKET}/replay"}
        for w in where.values():
            report = ingest([EXAMPLES / j for j in JOBS], warehouse=w)
            assert not report.refused
        replay_fleet(where["local"], force=True)  # numba and the readers warm
        rows = {
            "(a) replay, every job": lambda w: replay_fleet(w, force=True),
            "(b) replay, every job current": lambda w: replay_fleet(w),
            "(c) one estimate, template cached": _estimate,
        }
        for name, step in rows.items():
            step(where["S3"])  # the first run builds the mirror (and the template)
            local = _median(lambda s=step: s(where["local"]), args.repeats)
            remote = _median(lambda s=step: s(where["S3"]), args.repeats)
            print(
                f"{name:<36} local {local:7.3f} s  S3 {remote:7.3f} s  S3/local {remote / local:5.1f}x"
            )
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
