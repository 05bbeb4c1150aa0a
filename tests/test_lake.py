"""The manifest as a Delta Lake table on S3 (`warehouse.lake`), against a real local S3 server
(moto's server mode on 127.0.0.1) and real processes: a copy of a real warehouse's manifest reads
back the same, three processes committing at once lose nothing, a writer killed mid-commit
leaves no partial commit visible, and a reader pinned to a version sees that version only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_run import ROOT

ROWS_PER_COMMIT = 40


# A writer process: appends commits of ROWS_PER_COMMIT rows, all of one batch, until told to
# stop (argv: uri, tag, commits, or 0 for "until killed").
_WRITER = """
import datetime as dt, sys
from warehouse.lake import LakeManifest
lake = LakeManifest.at(sys.argv[1])
tag, commits, per = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
i = 0
while commits == 0 or i < commits:
    now = dt.datetime.now(dt.UTC)
    lake.append([{"job": f"{tag}/batch-{i}", "rank": r, "path": f"/traces/{tag}/{i}/{r}.json",
                  "sha256": f"{tag}-{i}-{r}", "size_bytes": 1, "status": "ok", "error": None,
                  "n_events": 1, "events_file": f"events/{tag}/{i}/{r}.parquet",
                  "ingested_at": now} for r in range(per)])
    print(i, flush=True)
    i += 1
"""


def _writer(env: dict[str, str], uri: str, tag: str, commits: int, per: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _WRITER, uri, tag, str(commits), str(per)],
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_real_manifest_copied_to_s3_reads_back_the_same(
    shared_traces: Path, s3_env: dict[str, str], tmp_path: Path
) -> None:
    from lumos.api import Warehouse
    from warehouse.lake import LakeManifest, import_manifest
    from warehouse.layout import Layout
    from warehouse.manifest import read_manifest

    wh = Warehouse.open(tmp_path / "wh", create=True)
    files = [
        shared_traces / "param" / "linear" / "linear_kineto.json.gz",
        shared_traces / "hta" / "cpu_only",
        shared_traces / "param" / "linear" / "linear_et.json.gz",  # not Kineto: refused
    ]
    wh.ingest(files)
    local = sorted(read_manifest(Layout.at(tmp_path / "wh")).rows, key=lambda r: r["sha256"])
    assert [r["status"] for r in local].count("refused") == 1

    lake = LakeManifest.at(f"s3://{s3_env['BUCKET']}/wh", s3_env)
    assert import_manifest(Layout.at(tmp_path / "wh"), lake) == 3
    assert sorted(lake.read().rows, key=lambda r: r["sha256"]) == local
    version, files_ok = lake.snapshot()
    assert files_ok == sorted(r["events_file"] for r in local if r["status"] == "ok")

    assert import_manifest(Layout.at(tmp_path / "wh"), lake) == 0  # again: nothing to add
    assert sorted(lake.read().rows, key=lambda r: r["sha256"]) == local
    assert lake.version() == version


def test_three_processes_committing_at_once_lose_nothing(s3_env: dict[str, str]) -> None:
    from warehouse.lake import LakeManifest

    uri = f"s3://{s3_env['BUCKET']}/wh"
    lake = LakeManifest.at(uri, s3_env)
    lake.ensure()
    commits, per = 6, 3
    writers = [_writer(s3_env, uri, f"w{k}", commits, per) for k in range(3)]
    for w in writers:
        assert w.wait(timeout=120) == 0
    expected = {f"w{k}-{i}-{r}" for k in range(3) for i in range(commits) for r in range(per)}
    assert {r["sha256"] for r in lake.read().rows} == expected
    assert lake.version() == 3 * commits  # version 0 is the table's creation


def test_a_writer_killed_mid_commit_leaves_whole_commits_only(s3_env: dict[str, str]) -> None:
    import boto3
    import pyarrow as pa
    import pyarrow.parquet as pq

    from warehouse.lake import LakeManifest

    uri = f"s3://{s3_env['BUCKET']}/wh"
    lake = LakeManifest.at(uri, s3_env)
    lake.ensure()
    writer = _writer(s3_env, uri, "killed", 0, ROWS_PER_COMMIT)
    assert writer.stdout.readline().strip() == "0"  # one commit made, more under way
    time.sleep(0.3)
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)

    # what a writer killed after its data file and before its log entry leaves behind
    orphan = pa.table({"job": ["orphan"], "sha256": ["orphan"]})
    sink = pa.BufferOutputStream()
    pq.write_table(orphan, sink)
    boto3.client(
        "s3",
        endpoint_url=s3_env["AWS_ENDPOINT_URL"],
        aws_access_key_id=s3_env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=s3_env["AWS_SECRET_ACCESS_KEY"],
        region_name=s3_env["AWS_REGION"],
    ).put_object(
        Bucket=s3_env["BUCKET"],
        Key="wh/manifest/part-00000-orphan.snappy.parquet",
        Body=sink.getvalue().to_pybytes(),
    )

    rows = lake.read().rows
    batches: dict[str, int] = {}
    for r in rows:
        batches[r["job"]] = batches.get(r["job"], 0) + 1
    assert batches and set(batches.values()) == {ROWS_PER_COMMIT}, batches
    assert "orphan" not in batches

    after = _writer(s3_env, uri, "next", 1, ROWS_PER_COMMIT)  # the next ingest completes
    assert after.wait(timeout=60) == 0
    assert len(lake.read().rows) == len(rows) + ROWS_PER_COMMIT


def test_a_pinned_version_sees_no_later_commit(s3_env: dict[str, str]) -> None:
    from warehouse.lake import LakeManifest

    uri = f"s3://{s3_env['BUCKET']}/wh"
    lake = LakeManifest.at(uri, s3_env)
    lake.ensure()
    assert _writer(s3_env, uri, "first", 1, 2).wait(timeout=60) == 0
    pinned = lake.version()
    assert _writer(s3_env, uri, "second", 1, 2).wait(timeout=60) == 0
    assert {r["sha256"] for r in lake.read(pinned).rows} == {"first-0-0", "first-0-1"}
    assert len(lake.read().rows) == 4
    lake.upkeep()  # compaction and checkpoint change no row
    assert len(lake.read().rows) == 4
    assert {r["sha256"] for r in lake.read(pinned).rows} == {"first-0-0", "first-0-1"}


def test_bad_uris_are_refused_by_name(s3_env: dict[str, str], tmp_path: Path) -> None:
    from warehouse.lake import LakeError, LakeManifest, is_remote

    assert not is_remote(tmp_path) and is_remote("s3://bucket/wh")
    with pytest.raises(LakeError, match=f"{tmp_path}: not an object-storage warehouse"):
        LakeManifest.at(str(tmp_path))
    with pytest.raises(LakeError, match="s3:///wh: no bucket"):
        LakeManifest.at("s3:///wh")
    missing = LakeManifest.at(f"s3://{s3_env['BUCKET']}/nothing-here", s3_env)
    with pytest.raises(LakeError, match=f"s3://{s3_env['BUCKET']}/nothing-here/manifest: cannot"):
        missing.read()
