"""Ingest into an S3 warehouse against a local one, measured (issue 38).

    .venv/bin/python bench/lake_ingest.py [--repeats 3] [--sizes 0,10000,100000] [--commits 5]

(a) Throughput: `warehouse.ingest.ingest` of the same real traces (the bundled dlrm_8rank ranks,
and ../shared/traces' nccl_parser_config and trace_diff/control when present) into a fresh
local warehouse and a fresh prefix of moto's S3 server on 127.0.0.1, --repeats times each;
medians, events/s and the S3/local ratio. (b) Per-commit overhead: a warehouse whose manifest
already holds N rows (one bulk append of synthetic rows of `TRACES`: the local manifest as one
part, the Delta table as one commit), then --commits ingests of one real trace file each (one
commit each); the median wall of such an ingest, local and S3. (c) Opening a connection and one
query over every event, local and S3. Numba is warmed first, in-process.
Defaults take ~1.5 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from table_format import manifest_rows  # noqa: E402

from warehouse.ingest import ingest  # noqa: E402

EXAMPLES = ROOT / "examples" / "traces"
SHARED = Path(os.environ.get("LUMOS_SHARED", ROOT.parent / "shared")) / "traces"
BUCKET = "lumos-bench-ingest"


def _s3() -> object:
    """moto's S3 server on 127.0.0.1, the AWS variables pointed at it, the bucket made."""
    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
    )
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=BUCKET)
    return server


def _inputs() -> list[Path]:
    paths = [EXAMPLES / "dlrm_8rank"]
    for extra in ("hta/nccl_parser_config", "hta/trace_diff/control"):
        if (SHARED / extra).is_dir():
            paths.append(SHARED / extra)
    return paths


def _timed(paths: list[Path], warehouse: str | Path, **kw: object) -> tuple[float, int, int]:
    t0 = time.perf_counter()
    report = ingest(paths, warehouse=warehouse, **kw)
    wall = time.perf_counter() - t0
    assert not report.refused, [f.error for f in report.refused]
    return wall, report.n_events, report.bytes_read


def throughput(repeats: int, scratch: Path) -> None:
    paths = _inputs()
    print(f"(a) ingest of {', '.join(p.name for p in paths)}")
    results: dict[str, list[tuple[float, int, int]]] = {"local": [], "S3": []}
    where_to = {"local": scratch / "local-0", "S3": ""}
    for i in range(repeats):
        results["local"].append(_timed(paths, scratch / f"local-{i}"))
        where_to["S3"] = f"s3://{BUCKET}/tp-{uuid.uuid4().hex[:8]}"
        results["S3"].append(_timed(paths, where_to["S3"]))
    medians = {}
    for where, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        events, nbytes = runs[0][1], runs[0][2]
        medians[where] = wall
        print(
            f"  {where:<6} median {wall:6.2f} s  ({', '.join(f'{r[0]:.2f}' for r in runs)})  "
            f"{events / wall:>9,.0f} events/s  {nbytes / wall / 1e6:5.2f} MB/s  "
            f"{events:,} events, {nbytes / 1e6:.1f} MB"
        )
    print(f"  S3 / local: {medians['S3'] / medians['local']:.2f}x")
    query(where_to, repeats)


def query(where_to: dict[str, str | Path], repeats: int) -> None:
    """(c) A connection opened (the snapshot pinned, the views made) and one query over every
    event (per rank: count and time span), as `Warehouse.arrow` does for each query."""
    from lumos.api import Warehouse

    sql = "select job, rank, count(*), max(ts_ns) - min(ts_ns) from events group by all"
    print(f"(c) open + one query over all events: {sql}")
    medians = {}
    for where, wh in where_to.items():
        handle = Warehouse.open(wh, object_store=True)
        walls = []
        for _ in range(max(repeats, 5)):
            t0 = time.perf_counter()
            handle.arrow(sql)
            walls.append(time.perf_counter() - t0)
        medians[where] = statistics.median(walls)
        print(f"  {where:<6} median {1e3 * medians[where]:6.0f} ms")
    print(f"  S3 / local: {medians['S3'] / medians['local']:.2f}x")


def _forget_reads() -> None:
    """What a fresh process has read of any manifest: nothing (both modules cache reads)."""
    from warehouse import lake, manifest

    lake._READ.clear()
    manifest._READ.clear()


def commit_overhead(sizes: list[int], commits: int, scratch: Path) -> None:
    from warehouse.lake import LakeManifest
    from warehouse.layout import Layout
    from warehouse.manifest import append_rows

    files = sorted((EXAMPLES / "dlrm_8rank").glob("*.json.gz"))[:commits]
    print(
        "(b) one ingest of one trace file (one commit) into a warehouse of N manifest rows: in "
        "a warm process (the manifest read before, as a long-lived worker has it) and in a "
        "fresh one (nothing read yet, as a nightly `lumos ingest` process; imports not counted)"
    )
    base: dict[str, float] = {}
    for n in sizes:
        rows = manifest_rows(n, 0, "bench").to_pylist()
        layout = Layout.at(scratch / f"filled-{n}")
        layout.ensure()
        append_rows(layout, rows)
        uri = f"s3://{BUCKET}/filled-{n}-{uuid.uuid4().hex[:6]}"
        lake = LakeManifest.at(uri)
        lake.ensure()
        lake.append(rows)
        walls: dict[str, list[float]] = {}
        for k, f in enumerate(files):
            for fresh in (False, True):
                for where, wh in (("local", layout.root), ("S3", uri)):
                    if fresh:
                        _forget_reads()
                    key = f"{where} {'fresh' if fresh else 'warm'}"
                    wall = _timed([f], wh, job=f"one-{k}-{fresh}-{f.name}")[0]
                    walls.setdefault(key, []).append(wall)
        _forget_reads()
        t0 = time.perf_counter()
        lake.read()
        read = time.perf_counter() - t0
        line = []
        for key, w in walls.items():
            med = statistics.median(w)
            base.setdefault(key, med)
            line.append(f"{key} {1e3 * med:5.0f} ms ({med / base[key]:.2f}x)")
        print(
            f"  N={n:>7,}: {'; '.join(line)}; a whole read of the Delta manifest {1e3 * read:.0f} ms"
        )
    print(f"  (x: of N={sizes[0]:,}; S3/local per column: the ratio of the medians above)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sizes", default="0,10000,100000")
    parser.add_argument("--commits", type=int, default=5)
    args = parser.parse_args()
    server = _s3()
    scratch = Path(tempfile.mkdtemp(prefix="lumos-bench-lake-"))
    try:
        _timed([EXAMPLES / "dlrm_8rank"], scratch / "warm")  # numba's kernels, imports
        throughput(args.repeats, scratch)
        commit_overhead([int(s) for s in args.sizes.split(",")], args.commits, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    main()
