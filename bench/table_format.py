"""Which open table format should hold the manifest, measured: Delta Lake or Iceberg.

    .venv/bin/python bench/table_format.py [--sizes 0,1000,10000] [--commits 15] [--writers 3]
                                           [--per-writer 15] [--history 300] [--formats delta,iceberg]

`deltalake`, and `pyiceberg` with a sqlite SQL catalog, each on a local directory and on moto's
S3 server (127.0.0.1), with rows of `TRACES`: (a) one one-row commit at N rows already there
(put in by commits of max(100, N/100) rows, then the format's upkeep: Delta compact + checkpoint,
Iceberg merge-append); (b) --writers processes x --per-writer commits to one S3 table at once,
every row there exactly once; (c) open the table anew and list its live files; (d) DuckDB
reading it through Arrow (no extension); (e) --history one-row commits in a row, no upkeep
(first and last tenth); install sizes. Today's manifest is the local baseline (`lumos`).
Medians in ms; the defaults take ~4.5 minutes on 2 shared cores.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from warehouse.schema import TRACES  # noqa: E402

BUCKET = "lumos-bench"


def manifest_rows(n: int, start: int, tag: str = "w") -> pa.Table:
    """n manifest rows of one small job, sha256 unique per (tag, index)."""
    idx = range(start, start + n)
    now = int(time.time() * 1e6)
    cols = {
        "job": [f"nightly/job-{i // 8}" for i in idx],
        "rank": [i % 8 for i in idx],
        "path": [f"/data/traces/{tag}/rank-{i}.pt.trace.json.gz" for i in idx],
        "sha256": [f"{tag}{i:0{64 - len(tag)}d}" for i in idx],
        "size_bytes": [1_000_000 + i for i in idx],
        "status": ["ok"] * n,
        "error": [None] * n,
        "n_events": [50_000] * n,
        "device": ["NVIDIA H100"] * n,
        "world_size": [8] * n,
        "schema_version": ["1.0.4"] * n,
        "trace_format": ["kineto"] * n,
        "rank_source": ["distributedInfo"] * n,
        "first_ts_ns": [i for i in idx],
        "last_ts_ns": [i + 1 for i in idx],
        "events_file": [f"events/job=x/rank=0/{tag}{i:0{64 - len(tag)}d}.parquet" for i in idx],
        "ingested_at": pa.array([now + i for i in idx], pa.timestamp("us", tz="UTC")),
    }
    return pa.table(cols, schema=TRACES)


# ---------------------------------------------------------------- the formats


class Delta:
    name = "delta"

    def __init__(self, uri: str, storage: dict[str, str] | None) -> None:
        self.uri, self.storage = uri, storage

    def create(self) -> None:
        from deltalake import DeltaTable

        DeltaTable.create(self.uri, schema=TRACES, storage_options=self.storage)

    def append(self, rows: pa.Table) -> None:
        from deltalake import write_deltalake

        write_deltalake(self.uri, rows, mode="append", storage_options=self.storage)

    def upkeep(self) -> None:
        from deltalake import DeltaTable

        dt = DeltaTable(self.uri, storage_options=self.storage)
        dt.optimize.compact()
        dt.create_checkpoint()

    def live_files(self) -> list[str]:
        from deltalake import DeltaTable

        return DeltaTable(self.uri, storage_options=self.storage).file_uris()

    def duckdb_rows(self, con) -> tuple[int, int]:  # noqa: ANN001
        from deltalake import DeltaTable

        ds = DeltaTable(self.uri, storage_options=self.storage).to_pyarrow_dataset()
        con.register("m", ds)
        out = con.execute("select count(*), count(distinct sha256) from m").fetchall()[0]
        con.unregister("m")
        return out


class Iceberg:
    name = "iceberg"

    def __init__(self, uri: str, storage: dict[str, str] | None, db: Path) -> None:
        self.uri, self.db = uri, db
        self.props = {}
        if storage:
            self.props = {
                "s3.endpoint": storage["AWS_ENDPOINT_URL"],
                "s3.access-key-id": storage["AWS_ACCESS_KEY_ID"],
                "s3.secret-access-key": storage["AWS_SECRET_ACCESS_KEY"],
                "s3.region": storage["AWS_REGION"],
            }

    def catalog(self):  # noqa: ANN201
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog("bench", uri=f"sqlite:///{self.db}", warehouse=self.uri, **self.props)

    def create(self) -> None:
        cat = self.catalog()
        cat.create_namespace_if_not_exists("lumos")
        cat.create_table(
            "lumos.manifest",
            schema=TRACES,
            location=self.uri + "/manifest",
            properties={
                "commit.manifest-merge.enabled": "true",
                "commit.retry.num-retries": "50",
                "commit.retry.min-wait-ms": "20",
            },
        )

    def table(self):  # noqa: ANN201
        return self.catalog().load_table("lumos.manifest")

    def append(self, rows: pa.Table) -> None:
        self.table().append(rows)

    def upkeep(self) -> None:
        """pyiceberg 0.12 has no data-file compaction: merge-append keeps the manifests few."""

    def live_files(self) -> list[str]:
        return [t.file.file_path for t in self.table().scan().plan_files()]

    def duckdb_rows(self, con) -> tuple[int, int]:  # noqa: ANN001
        self.table().scan().to_duckdb("m", connection=con)
        out = con.execute("select count(*), count(distinct sha256) from m").fetchall()[0]
        con.unregister("m")
        return out


class HomeMade:
    """Today's manifest (local only): flock + one Parquet part per commit + rename."""

    name = "lumos"

    def __init__(self, root: Path) -> None:
        from warehouse.layout import Layout

        self.layout = Layout.at(root)

    def create(self) -> None:
        self.layout.ensure()

    def append(self, rows: pa.Table) -> None:
        from warehouse.manifest import append_rows, commit_lock, compact, read_manifest

        with commit_lock(self.layout):
            read_manifest(self.layout)  # an ingest reads it before each commit
            append_rows(self.layout, rows.to_pylist())
            compact(self.layout)

    def upkeep(self) -> None:
        from warehouse.manifest import commit_lock, compact

        with commit_lock(self.layout):
            compact(self.layout, min_parts=2)

    def live_files(self) -> list[str]:
        """What `warehouse.snapshot.pin` lists first: the live parts, then their rows (read from
        scratch, as a new process does)."""
        from warehouse import manifest

        parts = self.layout.manifest_parts()
        manifest._READ.pop(self.layout.root, None)
        manifest.read_manifest(self.layout)
        return [str(p) for p in parts]

    def duckdb_rows(self, con) -> tuple[int, int]:  # noqa: ANN001
        parts = [str(p) for p in self.layout.manifest_parts()]  # the live ones
        q = "select count(*), count(distinct sha256) from read_parquet($parts)"
        return con.execute(q, {"parts": parts}).fetchall()[0]


# ---------------------------------------------------------------- places


class S3:
    """A moto S3 server on 127.0.0.1 and the credentials both formats read."""

    def __enter__(self) -> S3:
        from moto.server import ThreadedMotoServer

        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.storage = {
            "AWS_ENDPOINT_URL": f"http://{host}:{port}",
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }
        import boto3

        boto3.client(
            "s3",
            endpoint_url=self.storage["AWS_ENDPOINT_URL"],
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            region_name="us-east-1",
        ).create_bucket(Bucket=BUCKET)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()


def make(fmt: str, where: str, tmp: Path, key: str, storage: dict | None):  # noqa: ANN201
    uri = f"s3://{BUCKET}/{key}" if where == "s3" else str(tmp / key)
    if fmt == "delta":
        return Delta(uri, storage if where == "s3" else None)
    if fmt == "iceberg":
        if where == "local":
            uri = "file://" + uri
        return Iceberg(uri, storage if where == "s3" else None, tmp / f"{key}.db")
    return HomeMade(tmp / key)


def median_ms(fn, n: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# ---------------------------------------------------------------- (a), (c), (d)


def at_size(fmt, where, tmp, storage, n: int, commits: int) -> dict:  # noqa: ANN001
    t = make(fmt, where, tmp, f"{fmt}-{where}-{n}", storage)
    t.create()
    batch = max(100, n // 100)  # at most 100 commits to fill it
    for start in range(0, n, batch):
        t.append(manifest_rows(min(batch, n - start), start))
    t.upkeep()
    counter = iter(range(n, n + 10 * commits))
    commit = median_ms(lambda: t.append(manifest_rows(1, next(counter))), commits)
    files = t.live_files()
    snap = median_ms(t.live_files, 5)
    import duckdb

    con = duckdb.connect()
    got = t.duckdb_rows(con)
    if got != (n + commits, n + commits):
        raise SystemExit(f"{fmt} {where} {n}: DuckDB read {got}, expected {n + commits} rows")
    read = median_ms(lambda: t.duckdb_rows(con), 5)
    return {"commit": commit, "files": len(files), "snapshot": snap, "duckdb": read}


# ---------------------------------------------------------------- (b)


def _writer(args: tuple) -> tuple[list[float], int, int]:
    fmt, where, tmp, key, storage, tag, k, start_at = args
    import logging

    retries = _Count()
    logging.getLogger("pyiceberg").addHandler(retries)
    logging.getLogger("pyiceberg").propagate = False
    t = make(fmt, where, Path(tmp), key, storage)
    while time.time() < start_at:
        time.sleep(0.001)
    times, failed = [], 0
    for i in range(k):
        t0 = time.perf_counter()
        try:
            t.append(manifest_rows(1, i, tag))
        except Exception as exc:  # noqa: BLE001 (a lost commit is what this counts)
            failed += 1
            print(f"  {fmt} writer {tag}: commit {i} failed: {exc!s:.200}", file=sys.stderr)
        times.append((time.perf_counter() - t0) * 1e3)
    return times, failed, retries.n


class _Count(__import__("logging").Handler):
    """Counts pyiceberg's "Commit failed due to a concurrent update, retrying" records."""

    n = 0

    def emit(self, record) -> None:  # noqa: ANN001
        self.n += "retrying" in record.getMessage()


def concurrent(fmt, where, tmp, storage, writers: int, per_writer: int) -> dict:  # noqa: ANN001
    key = f"{fmt}-{where}-concurrent"
    make(fmt, where, tmp, key, storage).create()
    start_at = time.time() + 3.0  # every process imported and connected before the first commit
    jobs = [
        (fmt, where, str(tmp), key, storage, f"w{i}", per_writer, start_at) for i in range(writers)
    ]
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(writers) as pool:
        results = pool.map(_writer, jobs)
    wall = time.perf_counter() - t0 - 3.0
    import duckdb

    n, distinct = make(fmt, where, tmp, key, storage).duckdb_rows(duckdb.connect())
    times = [x for r in results for x in r[0]]
    return {
        "rows": n,
        "distinct": distinct,
        "expected": writers * per_writer,
        "failed": sum(r[1] for r in results),
        "retries": sum(r[2] for r in results) if fmt == "iceberg" else None,
        "version": _delta_version(tmp, key, storage) if fmt == "delta" else None,
        "commit": statistics.median(times),
        "per_s": writers * per_writer / wall,
    }


def _delta_version(tmp: Path, key: str, storage: dict) -> int:
    from deltalake import DeltaTable

    return DeltaTable(f"s3://{BUCKET}/{key}", storage_options=storage).version()


# ---------------------------------------------------------------- (e)


def history(fmt, tmp, commits: int) -> tuple[float, float]:  # noqa: ANN001
    t = make(fmt, "local", tmp, f"{fmt}-history", None)
    t.create()
    times = []
    for i in range(commits):
        t0 = time.perf_counter()
        t.append(manifest_rows(1, i))
        times.append((time.perf_counter() - t0) * 1e3)
    tenth = max(1, commits // 10)
    return statistics.median(times[:tenth]), statistics.median(times[-tenth:])


def install_mb(dist: str) -> float:
    """MB on disk of `dist` and of its dependencies that lumos itself does not pull in."""
    from packaging.requirements import Requirement

    def closure(name: str, extras: tuple[str, ...] = ()) -> set[str]:
        seen, todo = set(), [(name, extras)]
        while todo:
            n, ex = todo.pop()
            key = n.lower().replace("_", "-")
            if key in seen:
                continue
            try:
                reqs = md.requires(n) or []
            except md.PackageNotFoundError:
                continue
            seen.add(key)
            for r in map(Requirement, reqs):
                env = [{"extra": e} for e in ex] or [{"extra": ""}]
                if r.marker is None or any(r.marker.evaluate(e) for e in env):
                    todo.append((r.name, tuple(r.extras)))
        return seen

    name, _, extras = dist.partition("[")
    ours = closure("lumos")
    extra = closure(name, tuple(extras.rstrip("]").split(",")) if extras else ()) - ours
    total = 0
    for d in extra:
        for f in md.distribution(d).files or []:
            p = f.locate()
            if os.path.isfile(p):
                total += os.path.getsize(p)
    return total / 1e6


# ---------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="0,1000,10000")
    ap.add_argument("--commits", type=int, default=15)
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--per-writer", type=int, default=15)
    ap.add_argument("--history", type=int, default=300)
    ap.add_argument("--formats", default="delta,iceberg")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    formats = args.formats.split(",")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    tmp = Path(tempfile.mkdtemp(prefix="lumos-table-format-"))
    try:
        with S3() as s3:
            print("(a, c, d) medians in ms; rows already in the table -> one-row commit, "
                  "open + list live files, DuckDB count(distinct) through Arrow")  # fmt: skip
            print(f"{'format':8} {'where':6} {'rows':>6} {'commit':>8} {'files':>6} "
                  f"{'snapshot':>9} {'duckdb':>8}")  # fmt: skip
            for fmt in [*formats, "lumos"]:
                for where in ("local", "s3"):
                    if fmt == "lumos" and where == "s3":
                        continue
                    for n in sizes:
                        r = at_size(fmt, where, tmp, s3.storage, n, args.commits)
                        print(f"{fmt:8} {where:6} {n:>6} {r['commit']:>8.1f} {r['files']:>6} "
                              f"{r['snapshot']:>9.1f} {r['duckdb']:>8.1f}", flush=True)  # fmt: skip
            if not args.per_writer:
                return  # (e) and the sizes only with (b)
            print(
                f"\n(b) {args.writers} processes x {args.per_writer} one-row commits, same S3 table"
            )
            for fmt in formats:
                r = concurrent(fmt, "s3", tmp, s3.storage, args.writers, args.per_writer)
                ok = "OK" if r["rows"] == r["distinct"] == r["expected"] else "WRONG"
                print(f"{fmt:8} rows {r['rows']}/{r['expected']} distinct {r['distinct']} "
                      f"failed {r['failed']} {ok}; retries {r['retries']}, version {r['version']}; "
                      f"commit median {r['commit']:.0f} ms, "
                      f"{r['per_s']:.1f} commits/s in all", flush=True)  # fmt: skip
        if args.history:
            print(
                f"\n(e) {args.history} one-row commits in a row, no upkeep, local: first/last tenth"
            )
            for fmt in [*formats, "lumos"]:
                first, last = history(fmt, tmp, args.history)
                print(f"{fmt:8} {first:7.1f} -> {last:7.1f} ms", flush=True)
        print("\ninstall size (MB on disk, with the dependencies lumos lacks)")
        for dist in ("deltalake", "pyiceberg[sql-sqlite,pyarrow]", "moto[server]"):
            print(f"{dist:30} {install_mb(dist):7.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
