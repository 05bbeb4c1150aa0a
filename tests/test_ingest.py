"""Ingest into a real warehouse: jobs and ranks, refusals, bad inputs leave it unchanged.

Expected values come from the raw files (counted with the standard `json` module) or from the
trace README, never from the code under test.
"""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import shutil
from collections import Counter
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from warehouse_checks import query

from warehouse.errors import TraceError
from warehouse.ingest import ingest
from warehouse.jobs import InputError, rank_from_filename
from warehouse.layout import Layout, decode_job, encode_job
from warehouse.schema import EVENT_FILE, EVENTS, TRACES

DLRM = "param/dlrm_8rank/kineto"


def raw_events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)["traceEvents"]


def tree_digest(root: Path, *subdirs: str) -> dict[str, str]:
    """Relative path -> sha256 of every file under the given sub-directories."""
    out = {}
    for sub in subdirs:
        base = root / sub
        if not base.exists():
            continue
        for p in sorted(base.rglob("*")):
            if p.is_file():
                out[p.relative_to(root).as_posix()] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


# ------------------------------------------------------------------------------------ unit rules


@pytest.mark.parametrize(
    "name, rank",
    [
        ("rank-3.Jul_15_10_52_41.1074.pt.trace.json.gz", 3),
        ("rank3.json", 3),
        ("rank_12.json.gz", 12),
        ("worker3_step_12.1694128201557.pt.trace.json.gz", 3),
        ("worker_7.pt.trace.json", 7),
        ("sampled_rank-1.json.gz", 1),
        ("trace_8_rank_1.json", 1),
        ("Rank-5.json", 5),
        ("dlrm_eg_0.json.gz", None),  # a bare number is not a rank
        ("frank3.json", None),  # `rank` inside another word
        ("rank0_worker3.json", None),  # ambiguous
        ("rank_non_gpu.json.gz", None),
    ],
)
def test_rank_from_filename(name: str, rank: int | None) -> None:
    assert rank_from_filename(name) == rank


@pytest.mark.parametrize("job", ["kineto", "a/b c", "x=1%2", "é", ".", "..", "job-1.2_3"])
def test_job_encoding_roundtrip_and_is_one_path_component(job: str) -> None:
    enc = encode_job(job)
    assert "/" not in enc and enc not in (".", "..") and "=" not in enc
    assert decode_job(enc) == job


def test_encoding_is_injective_on_lookalikes() -> None:
    assert len({encode_job(j) for j in ["a/b", "a%2Fb", "a_b", "a b"]}) == 4


def test_long_job_names_are_bounded_distinct_and_do_not_wedge_ingest(
    shared_traces: Path, warehouse_dir: Path
) -> None:
    """A 300-character job name, a CJK name whose escapes pass 255 bytes, and two long names
    that differ in their last character: each ingests into a directory of bounded length with
    its full name in the tables, and ingests after them still work (issue 34, item 1)."""
    from warehouse.layout import JOB_DIR_MAX_BYTES

    trace = shared_traces / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
    names = ["j" * 300, "数据" * 14, "k" * 299 + "a", "k" * 299 + "b"]
    encoded = {encode_job(n) for n in names}
    assert len(encoded) == len(names)
    assert all(len(e.encode()) <= JOB_DIR_MAX_BYTES and "/" not in e for e in encoded)
    for name in names:
        report = ingest([trace], warehouse=warehouse_dir, job=name)
        assert not report.refused, report.refused
    report = ingest([trace], warehouse=warehouse_dir, job="short")
    assert not report.refused
    rows = query(warehouse_dir, "select job, count(*) as n from events group by job")
    assert sorted(j for j, _ in rows) == sorted([*names, "short"])
    assert len({n for _, n in rows}) == 1
    assert not (warehouse_dir / ".commit.journal").exists()


# ------------------------------------------------------------------------------ bundled examples


def test_dlrm_bundled_job_ingests_as_ranks_0_to_7(examples: Path, warehouse_dir: Path) -> None:
    report = ingest([examples / "dlrm_8rank"], warehouse=warehouse_dir)
    assert not report.refused
    assert report.jobs == {"dlrm_8rank": "path"}
    rows = query(warehouse_dir, "select job, rank, status, rank_source from traces order by rank")
    assert rows == [("dlrm_8rank", r, "ok", "distributedInfo") for r in range(8)]
    # every file's events, counted independently with json, are in the events view
    files = sorted((examples / "dlrm_8rank").glob("*.json.gz"))
    expected = {int(f.name[6]): len(raw_events(f)) for f in files}  # worker<N>_...
    got = dict(query(warehouse_dir, "select rank, count(*) from events group by rank"))
    assert got == expected
    # layout: partitioned by job and rank, one file per trace, job/rank stored inside too
    for rank in range(8):
        [path] = (warehouse_dir / "events" / "job=dlrm_8rank" / f"rank={rank}").glob("*.parquet")
        table = pq.read_table(path)
        assert table.schema.equals(EVENT_FILE)  # the sha256 is the file's name, not a column
        assert set(table.column("rank").to_pylist()) == {rank}
        assert set(table.column("job").to_pylist()) == {"dlrm_8rank"}
        assert path.stem == hashlib.sha256(files[rank].read_bytes()).hexdigest()
    # the views give the table's columns, in its order, the sha256 read from the file name
    with duckdb.connect(str(warehouse_dir / "lumos.duckdb"), read_only=True) as con:
        columns = [d[0] for d in con.execute("select * from events limit 0").description]
        shas = dict(
            con.execute("select rank, any_value(trace_sha256) from events group by 1").fetchall()
        )
    assert columns == EVENTS.names
    assert shas == {r: hashlib.sha256(files[r].read_bytes()).hexdigest() for r in range(8)}


def test_given_job_and_catalog_from_another_directory(
    examples: Path, warehouse_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = examples / "nccl_a100" / "nccl_data.json.gz"
    report = ingest([trace], warehouse=warehouse_dir, job="nccl run/1")
    assert [f.action for f in report.files] == ["ingested"]
    assert (warehouse_dir / "events" / f"job={encode_job('nccl run/1')}" / "rank=0").is_dir()
    # a user opening the catalog from elsewhere: the views still find the Parquet
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    raw = raw_events(trace)
    assert query(warehouse_dir, "select count(*) from events where job = 'nccl run/1'") == [
        (len(raw),)
    ]
    cats = Counter(e.get("cat", "") for e in raw)
    got = dict(query(warehouse_dir, "select cat_raw, count(*) from events group by 1"))
    assert {k or "": v for k, v in got.items()} == dict(cats)
    assert query(
        warehouse_dir, "select declared_rank, world_size, backend from distributed_info"
    ) == [(0, 2, "nccl")]
    assert query(warehouse_dir, "select count(*) > 0 from devices where name like '%A100%'") == [
        (True,)
    ]
    names = {
        r[0] for r in query(warehouse_dir, "select value from threads where kind = 'process_name'")
    }
    assert names  # process names of the trace's metadata events


def test_single_file_without_rank_is_rank_0_and_job_is_stem(
    examples: Path, warehouse_dir: Path, tmp_path: Path
) -> None:
    # strip distributedInfo so neither the trace nor the name gives a rank
    data = json.loads(gzip.decompress((examples / "nccl_a100" / "nccl_data.json.gz").read_bytes()))
    del data["distributedInfo"]
    src = tmp_path / "in" / "my_trace.pt.trace.json"
    src.parent.mkdir()
    src.write_text(json.dumps(data))
    report = ingest([src], warehouse=warehouse_dir)
    [f] = report.files
    assert (f.job, f.rank, f.status) == ("my_trace", 0, "ok")
    assert query(warehouse_dir, "select rank_source from traces") == [("single file",)]

    # two files of one --job, neither with a rank: both refused, clearly
    two = tmp_path / "two"
    two.mkdir()
    (two / "a.json").write_text(json.dumps(data))
    (two / "b.json").write_text(json.dumps({**data, "x": 1}))
    report = ingest([two], warehouse=warehouse_dir, job="two")
    assert [f.status for f in report.files] == ["refused", "refused"]
    for f in report.files:
        assert f.path in f.error and "cannot tell which rank" in f.error
    assert query(warehouse_dir, "select count(*) from events where job = 'two'") == [(0,)]
    # that refusal was about the other file: given alone, the same file is placed, not kept
    # refused; the other one then clashes with its rank, and is taken once given its own job
    [a] = ingest([two / "a.json"], warehouse=warehouse_dir, job="two").files
    assert (a.action, a.rank) == ("ingested", 0), a.error
    [b] = ingest([two / "b.json"], warehouse=warehouse_dir, job="two").files
    assert b.status == "refused" and "is already held by" in b.error
    [b] = ingest([two / "b.json"], warehouse=warehouse_dir, job="two_b").files
    assert b.status == "ok", b.error

    # without --job, a folder's files that name no rank are runs of their own (a folder of
    # unrelated traces, or successive windows of one process), named folder/stem
    solo = tmp_path / "solo"
    solo.mkdir()
    (solo / "w1.pt.trace.json").write_text(json.dumps({**data, "y": 1}))
    (solo / "w2.pt.trace.json").write_text(json.dumps({**data, "y": 2}))
    (solo / "rank-1.json").write_text(json.dumps({**data, "y": 3}))  # named: a rank of 'solo'
    report = ingest([solo], warehouse=warehouse_dir)
    got = sorted((f.job, f.rank, f.status) for f in report.files)
    assert got == [("solo", 1, "ok"), ("solo/w1", 0, "ok"), ("solo/w2", 0, "ok")]
    assert report.jobs == {"solo": "path", "solo/w1": "path", "solo/w2": "path"}
    assert (b.action, b.job) == ("ingested", "two_b"), b.error
    assert query(
        warehouse_dir, "select job, status from traces where job like 'two%' order by 1, 2"
    ) == [
        ("two", "ok"),
        ("two", "refused"),
        ("two_b", "ok"),
    ]


def test_a_rank_learnt_after_the_events_restamps_the_written_rows(
    examples: Path, warehouse_dir: Path, tmp_path: Path
) -> None:
    """distributedInfo after traceEvents: the rows were written under the file name's rank, and
    the file is rewritten with the trace's (`_restamp`). It reads back as EVENT_FILE, with the
    same rows as the same trace whose distributedInfo comes first (no rewrite)."""
    src = sorted((examples / "dlrm_8rank").glob("*.json.gz"))[2]
    data = json.loads(gzip.decompress(src.read_bytes()))
    events = data.pop("traceEvents")
    info = data.pop("distributedInfo")
    assert info["rank"] == 2
    late = tmp_path / "late_rank-5.json"  # the name says 5, the trace (said last) 2
    late.write_text(json.dumps({**data, "traceEvents": events, "distributedInfo": info}))
    [f] = ingest([late], warehouse=warehouse_dir, job="late").files
    assert (f.status, f.rank) == ("ok", 2), f.error
    first = tmp_path / "first_rank-5.json"  # the same text, distributedInfo first
    first.write_text(json.dumps({**data, "distributedInfo": info, "traceEvents": events}))
    [g] = ingest([first], warehouse=warehouse_dir, job="first").files
    sql = "select job, rank, rank_source, n_events from traces order by job"
    assert query(warehouse_dir, sql) == [
        ("first", 2, "distributedInfo", len(events)),
        ("late", 2, "distributedInfo", len(events)),
    ]
    layout = Layout.at(warehouse_dir)
    rewritten = pq.read_table(layout.events_file("late", 2, f.sha256))
    plain = pq.read_table(layout.events_file("first", 2, g.sha256))
    assert rewritten.schema.equals(EVENT_FILE, check_metadata=False)
    assert set(rewritten.column("job").to_pylist()) == {"late"}
    assert rewritten.drop_columns(["job"]).equals(plain.drop_columns(["job"]))


def test_same_job_rank_with_different_content_refuses_the_second(
    examples: Path, warehouse_dir: Path, tmp_path: Path
) -> None:
    files = sorted((examples / "dlrm_8rank").glob("*.json.gz"))
    clash = tmp_path / "clash"
    clash.mkdir()
    # rank-3 by name, but the trace's distributedInfo says rank 0: it claims rank 0 too
    shutil.copy(files[0], clash / "a_rank-0.json.gz")
    shutil.copy(files[1], clash / "b_rank-0.json.gz")
    data = json.loads(gzip.decompress(files[2].read_bytes()))
    data["distributedInfo"]["rank"] = 0
    (clash / "c.json").write_text(json.dumps(data))
    report = ingest([clash], warehouse=warehouse_dir, job="J")
    by_name = {Path(f.path).name: f for f in report.files}
    assert by_name["a_rank-0.json.gz"].status == "ok"
    assert by_name["a_rank-0.json.gz"].rank == 0
    assert by_name["b_rank-0.json.gz"].status == "ok"  # distributedInfo says rank 1
    assert by_name["b_rank-0.json.gz"].rank == 1
    refused = by_name["c.json"]
    assert refused.status == "refused"
    assert "rank 0 is already held by" in refused.error and "a_rank-0.json.gz" in refused.error
    assert query(
        warehouse_dir, "select rank, count(distinct trace_sha256) from events group by 1 order by 1"
    ) == [
        (0, 1),
        (1, 1),
    ]
    # the same content under another path is not a clash: it is the same trace
    shutil.copy(files[0], tmp_path / "copy_rank-0.json.gz")
    [f] = ingest([tmp_path / "copy_rank-0.json.gz"], warehouse=warehouse_dir, job="J").files
    assert (f.action, f.status) == ("unchanged", "ok")


# ----------------------------------------------------------------------------------- bad inputs


def _with_world_size(text: bytes, world: int) -> bytes:
    doc = json.loads(text)
    doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "world_size": world}
    return json.dumps(doc).encode()


def _bad_inputs(examples: Path, tmp: Path) -> dict[str, Path]:
    good = (examples / "nccl_a100" / "nccl_data.json.gz").read_bytes()
    text = gzip.decompress(good)
    cases = {
        "empty.json": b"",
        "truncated_gzip.json.gz": good[: len(good) // 2],
        "truncated_json.json": text[: len(text) // 2],
        "not_a_trace.json": json.dumps({"hello": [1, 2, 3]}).encode(),
        "array.json": b"[1, 2, 3]",
        "binary.json.gz": gzip.compress(bytes(range(256)) * 10),
        "missing_trace_events.json": json.dumps(
            {"schemaVersion": 1, "deviceProperties": []}
        ).encode(),
        # a world size the manifest cannot hold (found by fuzzing: a crash that left orphans)
        "huge_world.json": _with_world_size(text, 2**40),
        "ts_string.json": json.dumps(
            {"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "soon", "dur": 1}]}
        ).encode(),
        "dur_list.json": json.dumps(
            {"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": [1]}]}
        ).encode(),
        "huge_int.json": b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": '
        + str(2**64 + 5).encode()
        + b', "dur": 1}]}',
        "latin1.json": '{"traceEvents": [{"ph": "X", "name": "caf\u00e9", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}'.encode(
            "latin-1"
        ),
    }
    out = {}
    for name, data in cases.items():
        p = tmp / "bad" / name.split(".")[0] / name
        p.parent.mkdir(parents=True)
        p.write_bytes(data)
        out[name] = p
    return out


def test_bad_inputs_are_refused_and_leave_the_data_unchanged(
    examples: Path, warehouse_dir: Path, tmp_path: Path
) -> None:
    """'Unchanged' means: the events and trace_meta trees are byte-identical, the events view
    answers the same, and the manifest gains exactly one `refused` row naming the bad file (the
    issue asks for the refusal to be recorded). An argument that is not a file gains nothing."""
    ingest([examples / "dlrm_8rank"], warehouse=warehouse_dir)
    before = tree_digest(warehouse_dir, "events", "trace_meta")
    events_before = query(
        warehouse_dir, "select job, rank, count(*) from events group by all order by all"
    )
    n_rows = len(query(warehouse_dir, "select * from traces"))
    for name, path in _bad_inputs(examples, tmp_path).items():
        report = ingest([path], warehouse=warehouse_dir)
        [f] = report.files
        assert f.status == "refused", name
        assert f.error.startswith(str(path)), f.error
        assert len(f.error) > len(str(path)) + 10, f.error  # says what the problem is
        assert tree_digest(warehouse_dir, "events", "trace_meta") == before, name
        assert (
            query(warehouse_dir, "select job, rank, count(*) from events group by all order by all")
            == events_before
        )
        n_rows += 1
        rows = query(
            warehouse_dir, f"select status, error, n_events from traces where path = '{path}'"
        )
        assert rows == [("refused", f.error, 0)], name
        assert len(query(warehouse_dir, "select * from traces")) == n_rows
    # a directory without traces, a missing path: refused before anything is written
    manifest_before = tree_digest(warehouse_dir, "manifest")
    empty = tmp_path / "no_traces"
    empty.mkdir()
    (empty / "README.md").write_text("nothing here")
    for arg in (empty, tmp_path / "does_not_exist"):
        with pytest.raises(InputError) as err:
            ingest([arg], warehouse=warehouse_dir)
        assert str(arg) in str(err.value)
        assert isinstance(err.value, TraceError)
    assert tree_digest(warehouse_dir, "events", "trace_meta", "manifest") == {
        **before,
        **manifest_before,
    }


def test_refused_file_recorded_once_and_reported_again(
    examples: Path, warehouse_dir: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "cut.json"
    bad.write_bytes(
        gzip.decompress((examples / "nccl_a100" / "nccl_data.json.gz").read_bytes())[:5000]
    )
    first = ingest([bad], warehouse=warehouse_dir).files[0]
    again = ingest([bad], warehouse=warehouse_dir)
    second = again.files[0]
    assert (first.action, second.action) == ("refused", "still refused")
    # counted once, as refused (issue 34, item 7: it was counted unchanged and refused)
    assert "1 file(s): 0 ingested, 0 unchanged, 1 refused" in again.summary()
    assert second.error == first.error
    parts = list((warehouse_dir / "manifest").glob("part-*.parquet"))
    rows = [r for p in parts for r in pq.read_table(p, schema=TRACES).to_pylist()]
    assert [(r["status"], r["n_events"], r["events_file"]) for r in rows] == [("refused", 0, None)]
    assert not list((warehouse_dir / "events").rglob("job=*"))


# ------------------------------------------------------------------------------- all shared data


def test_every_shared_trace_is_ingested_or_refused(
    shared_traces: Path, warehouse_dir: Path
) -> None:
    from warehouse.layout import SIDECAR_NAMES

    # every JSON file but the ground-truth runs' `measured.json` beside their traces
    # (gpu_h100/*/), which a directory walk skips by name
    files = sorted(
        p
        for p in shared_traces.rglob("*")
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and p.name not in SIDECAR_NAMES
    )
    report = ingest([shared_traces], warehouse=warehouse_dir, workers=2)
    assert sorted(Path(f.path) for f in report.files) == files
    for f in report.files:
        assert f.status in ("ok", "refused")
        if f.status == "refused":
            assert f.error and f.error.startswith(f.path), f
    ok = {f.path: f for f in report.files if f.status == "ok"}
    # host execution traces are refused as such
    for f in report.files:
        if "/et/" in f.path or f.path.endswith("_et.json.gz"):
            assert f.status == "refused" and "execution trace" in f.error
    # the DLRM job: one job, ranks 0-7
    assert query(
        warehouse_dir,
        f"select rank from traces where job = 'traces/{DLRM}' and status = 'ok' order by rank",
    ) == [(r,) for r in range(8)]
    # every ok file's events are all visible, and only those
    counts = dict(query(warehouse_dir, "select path, n_events from traces where status = 'ok'"))
    seen = dict(
        query(
            warehouse_dir,
            "select t.path, count(*) from events e join traces t "
            "on e.job = t.job and e.trace_sha256 = t.sha256 group by 1",
        )
    )
    assert {p: n for p, n in counts.items() if n} == seen
    assert set(counts) == set(ok)
    # an independent count for two files
    for rel in (
        "hta/trace_diff/test/test.json.gz",
        f"{DLRM}/worker5_step_12.1694128201549.pt.trace.json.gz",
    ):
        path = shared_traces / rel
        assert counts[str(path)] == len(raw_events(path)), rel
    # kineto/ and tracelens/ hold independent traces that name no rank: each is its own job
    assert not [f for f in report.refused if "cannot tell which rank" in f.error]
    solo = {f.job for f in report.files if f.job.startswith("traces/tracelens/")}
    assert "traces/tracelens/h100_qwen1.5-0.5b_inference" in solo and len(solo) == 4


def test_job_named_by_the_trace(shared_traces: Path, warehouse_dir: Path) -> None:
    path = shared_traces / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    report = ingest([path], warehouse=warehouse_dir)
    assert report.jobs == {"torchx-pytorch_resnet_integration_test-bq9m2dtfhskc6c": "trace"}
    # --job wins over the trace
    report = ingest([path], warehouse=warehouse_dir, job="mine")
    assert report.jobs == {"mine": "given"}
    # re-ingest without --job: recognised by path, nothing parsed or written
    report = ingest([path], warehouse=warehouse_dir)
    assert [f.action for f in report.files] == ["unchanged"]


def test_layout_paths(tmp_path: Path) -> None:
    layout = Layout.at(tmp_path / "wh")
    assert layout.root.is_absolute()
    p = layout.events_file("a/b", 3, "f" * 64)
    assert p == layout.root / "events" / "job=a%2Fb" / "rank=3" / ("f" * 64 + ".parquet")


def test_manifest_compaction_keeps_the_latest_rows_and_progress(
    examples: Path, warehouse_dir: Path
) -> None:
    from warehouse.manifest import commit_lock, compact

    files = sorted((examples / "dlrm_8rank").glob("*.json.gz"))[:3]
    seen = []
    start = dt.datetime.now(dt.UTC)
    for f in files:
        ingest([f], warehouse=warehouse_dir, job="c", progress=seen.append)
    end = dt.datetime.now(dt.UTC)
    assert [(p.files_done, p.files_total, p.events_done > 0) for p in seen] == [(1, 1, True)] * 3
    assert seen[0].bytes_done == seen[0].bytes_total == files[0].stat().st_size
    layout = Layout.at(warehouse_dir)
    before = query(warehouse_dir, "select * from traces order by all")
    assert len(layout.manifest_parts()) == 3
    with commit_lock(layout):
        assert compact(layout, min_parts=2)
    assert len(layout.manifest_parts()) == 1
    assert query(warehouse_dir, "select * from traces order by all") == before
    # the commit times, as the clock had them (not epoch-shifted by a unit), through the merge
    times = [r[0] for r in query(warehouse_dir, "select ingested_at from traces order by 1")]
    assert len(times) == 3 and all(start <= t <= end for t in times), (start, times, end)


def test_a_compaction_keeps_the_parts_a_reader_listed(
    examples: Path, warehouse_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, item 5: a query that listed the manifest's parts just before a compaction can
    still open every one of them (it failed with "Cannot open file"), and sees each file once;
    the parts merged away go after their grace period."""
    import warehouse.manifest as manifest_module
    from warehouse.manifest import commit_lock, compact

    files = sorted((examples / "dlrm_8rank").glob("*.json.gz"))[:3]
    for f in files:
        ingest([f], warehouse=warehouse_dir, job="c")
    layout = Layout.at(warehouse_dir)
    listed = layout.manifest_parts()  # what a query's glob saw
    assert len(listed) == 3
    with commit_lock(layout):
        assert compact(layout, min_parts=2)
    assert all(p.exists() for p in listed)
    assert len(layout.manifest_parts()) == 1
    rows = query(warehouse_dir, "select job, sha256, count(*) from traces group by all")
    assert len(rows) == 3 and {n for *_, n in rows} == {1}
    monkeypatch.setattr(manifest_module, "RETIRED_GRACE_S", 0.0)
    with commit_lock(layout):
        compact(layout, min_parts=2)  # nothing to merge; the retired parts' time is up
    assert not any(p.exists() for p in listed)
    assert len(query(warehouse_dir, "select * from traces")) == 3


def test_many_one_job_ingests_keep_the_manifest_compact(
    examples: Path, warehouse_dir: Path
) -> None:
    """A nightly run of one ingest per job: every ingest reads all the manifest's parts, so the
    commits merge them once COMPACT_AFTER_PARTS are there; the small parts a commit appends are
    written uncompressed (read back by every ingest), the merged one zstd'd."""
    from warehouse.manifest import COMPACT_AFTER_PARTS

    trace = sorted((examples / "dlrm_8rank").glob("*.json.gz"))[0]
    layout = Layout.at(warehouse_dir)
    counts = []
    for k in range(COMPACT_AFTER_PARTS + 4):
        ingest([trace], warehouse=warehouse_dir, job=f"night{k}")
        counts.append(len(layout.manifest_parts()))
    assert max(counts) == COMPACT_AFTER_PARTS - 1 < COMPACT_AFTER_PARTS + 4
    assert counts[COMPACT_AFTER_PARTS - 1] == 1  # the commit that made the 16th part merged
    rows = query(warehouse_dir, "select job, status, n_events from traces order by job")
    assert sorted(r[0] for r in rows) == sorted(f"night{k}" for k in range(COMPACT_AFTER_PARTS + 4))
    assert {(r[1], r[2]) for r in rows} == {("ok", rows[0][2])}
    codecs = {
        p.name: pq.ParquetFile(p).metadata.row_group(0).column(0).compression
        for p in layout.manifest_parts()
    }
    merged = min(layout.manifest_parts())  # parts are named in time order
    assert codecs.pop(merged.name) == "ZSTD"
    assert set(codecs.values()) == {"UNCOMPRESSED"}


def test_a_file_is_read_once_unless_a_file_of_its_size_is_known(
    examples: Path, warehouse_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of a size no manifest row has cannot be in the warehouse: the reading that parses
    it also hashes it. A file of a known size is hashed first and skipped unparsed when its
    content is there; with other content, it is parsed and stored under its own hash. A refused
    file's row carries the hash of the whole file all the same."""
    import warehouse.ingest as ingest_module

    hashed: list[str] = []
    real = ingest_module.sha256_file
    monkeypatch.setattr(ingest_module, "sha256_file", lambda p: hashed.append(p.name) or real(p))

    def sha(p: Path) -> str:
        return hashlib.sha256(p.read_bytes()).hexdigest()

    text = gzip.decompress((examples / "gpt_cpu/rank-0.pt.trace.json.gz").read_bytes())
    first = tmp_path / "a" / "first.json"
    first.parent.mkdir()
    first.write_bytes(text)
    report = ingest([first], warehouse=warehouse_dir, job="a")
    assert [f.action for f in report.files] == ["ingested"] and hashed == []
    assert report.files[0].sha256 == sha(first)

    report = ingest([first], warehouse=warehouse_dir, job="a")  # known size: hashed, not parsed
    assert [f.action for f in report.files] == ["unchanged"] and hashed == ["first.json"]

    at = text.index(b'"name": "') + len(b'"name": "')
    twin = tmp_path / "b" / "twin.json"  # the same size, one byte of a name changed
    twin.parent.mkdir()
    twin.write_bytes(text[:at] + (b"Y" if text[at : at + 1] != b"Y" else b"Z") + text[at + 1 :])
    report = ingest([twin], warehouse=warehouse_dir, job="b")
    assert [f.action for f in report.files] == ["ingested"] and hashed[1:] == ["twin.json"]
    assert report.files[0].sha256 == sha(twin) != sha(first)

    broken = tmp_path / "c" / "broken.json"
    broken.parent.mkdir()
    broken.write_bytes(text[: len(text) // 2])
    report = ingest([broken], warehouse=warehouse_dir, job="c")
    assert [f.status for f in report.files] == ["refused"]
    rows = query(warehouse_dir, "select path, sha256 from traces order by path")
    assert rows == sorted((str(p), sha(p)) for p in (first, twin, broken))
    events = query(warehouse_dir, "select job, trace_sha256, count(*) from events group by all")
    assert sorted(r[:2] for r in events) == [("a", sha(first)), ("b", sha(twin))]


def test_events_files_that_store_their_sha256_read_the_same(
    examples: Path, warehouse_dir: Path
) -> None:
    """Warehouses written before the hash moved into the file name hold events files with a
    `trace_sha256` column: the views read them as they read the new ones."""
    from warehouse.catalog import build_catalog

    ingest([examples / "nccl_a100"], warehouse=warehouse_dir)
    sql = "select * from events order by rank, event_idx"
    before = query(warehouse_dir, sql)
    [path] = (warehouse_dir / "events").rglob("rank=*/*.parquet")
    table = pq.read_table(path)
    column = pa.array([path.stem] * table.num_rows, pa.string())
    pq.write_table(table.add_column(2, pa.field("trace_sha256", pa.string(), False), column), path)
    (warehouse_dir / "lumos.duckdb").unlink()
    build_catalog(warehouse_dir)
    assert query(warehouse_dir, sql) == before


def test_a_catalog_built_from_other_view_sql_is_rebuilt(
    examples: Path, warehouse_dir: Path
) -> None:
    """A catalog keeps the views of the code that built it: one whose SQL differs from this
    code's (an older lumos) is not current, and the next ingest rebuilds it."""
    from warehouse.catalog import catalog_is_current, views_fingerprint

    ingest([examples / "nccl_a100"], warehouse=warehouse_dir)
    assert catalog_is_current(warehouse_dir)
    with duckdb.connect(str(warehouse_dir / "lumos.duckdb")) as con:
        con.execute("UPDATE lumos_catalog SET views_sha = 'older'")
    assert not catalog_is_current(warehouse_dir)
    ingest([examples / "nccl_a100"], warehouse=warehouse_dir)  # unchanged, yet the catalog is
    assert catalog_is_current(warehouse_dir)
    [(sha,)] = query(warehouse_dir, "select views_sha from lumos_catalog")
    assert sha == views_fingerprint()


def _row_of(schema: pa.Schema) -> dict:
    """One row of made-up values of the schema's types (for files an older lumos wrote)."""
    value = {pa.types.is_string: "x", pa.types.is_boolean: False, pa.types.is_integer: 1}
    row = {}
    for f in schema:
        if pa.types.is_timestamp(f.type):
            row[f.name] = dt.datetime.now(dt.UTC)
        elif pa.types.is_floating(f.type):
            row[f.name] = 1.0
        else:
            row[f.name] = next(v for test, v in value.items() if test(f.type))
    return row


def test_a_derived_table_from_before_a_column_existed_shows_the_column_as_null(
    examples: Path, warehouse_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`estimates` files saved before `host_cores` existed: the view still has the column, null
    in them, because the catalog keeps the table's current schema beside its files
    (`_schema.parquet`, rewritten when stale); a derived table's schema is part of the catalog's
    fingerprint, so a column added by a new lumos rebuilds the catalog of an old warehouse."""
    from warehouse import catalog
    from warehouse.catalog import build_catalog, views_fingerprint
    from warehouse.layout import SCHEMA_FILE, write_parquet_atomic
    from warehouse.schema import ESTIMATES, TABLES

    ingest([examples / "nccl_a100"], warehouse=warehouse_dir)
    older = pa.schema([f for f in ESTIMATES if f.name != "host_cores"])
    folder = warehouse_dir / "estimates"
    old_file = folder / "job=x" / "sweep=old.parquet"
    old_file.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([_row_of(older)], schema=older), old_file)
    write_parquet_atomic(older.empty_table(), folder / SCHEMA_FILE)  # as if written then
    build_catalog(warehouse_dir)
    assert query(warehouse_dir, "select job, host_cores from estimates") == [("x", None)]
    assert pq.read_schema(folder / SCHEMA_FILE).equals(ESTIMATES, check_metadata=False)

    before = views_fingerprint()
    monkeypatch.setitem(TABLES, "estimates", older)
    catalog.views_fingerprint.cache_clear()
    assert views_fingerprint() != before
    monkeypatch.undo()
    catalog.views_fingerprint.cache_clear()
    assert views_fingerprint() == before


def test_the_catalog_stamp_stands_for_the_catalog_it_was_written_with(
    examples: Path, warehouse_dir: Path
) -> None:
    """The check reads the stamp beside the catalog instead of opening it, only while the stamp
    matches the file: a catalog written since, a missing or foreign stamp, or a derived table
    written since all send it back to the catalog itself (or to a rebuild)."""
    from warehouse.catalog import build_catalog, catalog_is_current

    ingest([examples / "nccl_a100"], warehouse=warehouse_dir)
    stamp = warehouse_dir / ".lumos.duckdb.stamp"
    assert json.loads(stamp.read_text())["views_sha"]
    assert catalog_is_current(warehouse_dir)

    # a stamp that claims more than the catalog holds is not believed once the file changed
    data = json.loads(stamp.read_text())
    stamp.write_text(json.dumps({**data, "views": [*data["views"], "tasks"], "size": 1}))
    (warehouse_dir / "tasks").mkdir()
    pq.write_table(pa.table({"x": [1]}), warehouse_dir / "tasks" / "part.parquet")
    assert not catalog_is_current(warehouse_dir)  # the catalog has no `tasks` view

    # a missing stamp: the catalog is asked, and the stamp written again
    build_catalog(warehouse_dir)
    stamp.unlink()
    assert catalog_is_current(warehouse_dir)
    assert "tasks" in json.loads(stamp.read_text())["views"]

    # garbage in the stamp is no stamp
    stamp.write_text("{not json")
    assert catalog_is_current(warehouse_dir)
    assert json.loads(stamp.read_text())["root"] == str(warehouse_dir.resolve())


def test_data_files_are_durable_before_their_manifest_row(
    examples: Path, warehouse_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, item 8: every events and trace_meta file is fsync'd, and so are the folders
    its rename wrote, before the manifest part that makes it visible is written."""
    import os

    synced: list[tuple[str, int]] = []  # (path, manifest parts present when it was synced)
    real_fsync, real_open = os.fsync, os.open
    names: dict[int, str] = {}

    def track_open(path, flags, *args, **kwargs):  # noqa: ANN001, ANN202
        fd = real_open(path, flags, *args, **kwargs)
        names[fd] = str(path)
        return fd

    def track_fsync(fd: int) -> None:
        parts = len(list((warehouse_dir / "manifest").glob("part-*.parquet")))
        synced.append((names.get(fd, "?"), parts))
        real_fsync(fd)

    monkeypatch.setattr(os, "open", track_open)
    monkeypatch.setattr(os, "fsync", track_fsync)
    report = ingest([examples / "nccl_a100"], warehouse=warehouse_dir)
    monkeypatch.undo()
    assert not report.refused
    layout = Layout.at(warehouse_dir)
    (row,) = query(warehouse_dir, "select job, rank, sha256 from traces")
    data = [layout.events_file(*row), layout.trace_meta_file(*row)]
    # the staged files (renamed into place after) were synced while no manifest part existed
    for suffix in (".events.parquet", ".meta.parquet"):
        staged = [p for p, n in synced if "_staging" in p and p.endswith(suffix) and n == 0]
        assert staged, f"no staged {suffix} file fsync'd before the manifest part was written"
    for f in data:
        assert f.exists()
        assert any(p == str(f.parent) and n == 0 for p, n in synced), f.parent


def test_files_that_say_nothing_or_something_wrong_are_refused_by_name(
    examples: Path, tmp_path: Path, warehouse_dir: Path
) -> None:
    """Issue 34, item 7: a trace with no events, a `distributedInfo.rank` that is not an
    integer, and gzip of zeros are each refused with what is wrong, not ingested as something
    else."""
    src = examples / "dlrm_8rank" / "worker0_step_12.1694128201545.pt.trace.json.gz"
    doc = json.loads(gzip.decompress(src.read_bytes()))
    empty = dict(doc, traceEvents=[])
    three = dict(doc, distributedInfo={**doc.get("distributedInfo", {}), "rank": "three"})
    files = {
        "empty.json": (json.dumps(empty).encode(), "no events"),
        "three.json": (
            json.dumps(three).encode(),
            "distributedInfo.rank 'three' is not an integer",
        ),
        "zeros.json.gz": (gzip.compress(b"\0" * 65536), "only zero bytes"),
    }
    for name, (data, _) in files.items():
        (tmp_path / name).write_bytes(data)
    report = ingest([tmp_path / n for n in files], warehouse=warehouse_dir)
    errors = {Path(r.path).name: r.error for r in report.refused}
    assert set(errors) == set(files)
    for name, (_, why) in files.items():
        assert why in errors[name] and name in errors[name], errors[name]
    assert query(warehouse_dir, "select count(*) from events") == [(0,)]


def test_linked_folders_are_walked_once_and_loops_are_named(
    examples: Path, tmp_path: Path, warehouse_dir: Path
) -> None:
    """Issue 34, item 7: a job folder linked into the argument is ingested (it was skipped
    without a word), and a link back up is named as skipped instead of walked forever."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "dlrm").symlink_to(examples / "dlrm_8rank", target_is_directory=True)
    (jobs / "loop").symlink_to(tmp_path, target_is_directory=True)
    report = ingest([jobs], warehouse=warehouse_dir)
    assert not report.refused
    assert len(report.ingested) == 8
    assert any("already walked" in why for _, why in report.skipped), report.skipped


def test_files_that_cannot_be_opened_are_named_not_fatal(
    examples: Path, tmp_path: Path, warehouse_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34, item 7: a trace the OS will not open aborted the whole ingest with a traceback;
    a broken link or a pipe named like a trace was skipped without a word. In a folder each is
    named as skipped and the others are ingested; named on the command line, it is an input
    error that writes nothing. (The test runs as root, whom permissions do not stop: the OS's
    refusal is made by `open` itself.)"""
    import builtins
    import os

    from warehouse.jobs import InputError

    folder = tmp_path / "job"
    shutil.copytree(examples / "dlrm_8rank", folder)
    locked = sorted(folder.glob("*.json.gz"))[0]
    (folder / "gone.json.gz").symlink_to(tmp_path / "nowhere.json.gz")
    os.mkfifo(folder / "pipe.json")
    real_open = builtins.open

    def refusing_open(file, *args, **kwargs):  # noqa: ANN001, ANN202
        if Path(file) == locked:
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refusing_open)
    with pytest.raises(InputError, match="cannot be read \\(Permission denied\\)"):
        ingest([locked], warehouse=warehouse_dir)
    assert not (warehouse_dir / "manifest").exists()
    report = ingest([folder], warehouse=warehouse_dir)
    assert len(report.ingested) == 7 and not report.refused
    why = "\n".join(note for _, note in report.skipped)
    assert f"{locked}: cannot be read (Permission denied): skipped" in why
    assert "gone.json.gz: a link to" in why and "which does not exist" in why
    assert "pipe.json: a pipe, named like a trace: skipped" in why


def test_a_killed_writers_temporary_files_are_swept(examples: Path, warehouse_dir: Path) -> None:
    """Issue 34, item 4: temporary files a killed catalog build or replay left (their writer's
    pid is gone) are removed by the next catalog build; a live writer's are kept."""
    import os
    import subprocess
    import sys

    from warehouse.catalog import build_catalog
    from warehouse.layout import temp_path

    ingest([examples / "nccl_a100"], warehouse=warehouse_dir)
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(gone.stdout)
    derived = warehouse_dir / "schedules" / "job=nccl_a100"
    derived.mkdir(parents=True)
    stale = [
        warehouse_dir / f".lumos.duckdb.{dead}-{'a' * 32}.tmp",
        warehouse_dir / f".lumos.duckdb.{dead}-{'a' * 32}.tmp.wal",
        derived / f".part.parquet.{dead}-{'b' * 32}.tmp",
    ]
    live = temp_path(derived / "part.parquet")
    for p in [*stale, live]:
        p.write_bytes(b"partial")
    assert str(os.getpid()) in live.name
    build_catalog(warehouse_dir)
    assert not [p for p in stale if p.exists()]
    assert live.exists()


def test_a_catalog_connection_reads_one_snapshot(examples: Path, warehouse_dir: Path) -> None:
    """Issue 34, item 5: a query saw a file's `traces` row without its events (the views listed
    their files at different moments). A connection lumos opens lists the files once, manifest
    first: commits after it stay invisible to every view alike, and a data file placed without
    its manifest row (a commit in progress) is not even listed."""
    from warehouse.catalog import connect, connect_read_only

    files = sorted((examples / "dlrm_8rank").glob("*.json.gz"))[:3]
    ingest([files[0]], warehouse=warehouse_dir, job="a")
    layout = Layout.at(warehouse_dir)
    counts = (
        "select (select count(*) from traces), (select count(distinct trace_sha256) from events),"
        " (select count(distinct trace_sha256) from trace_meta)"
    )
    opens = [lambda: connect(layout.catalog_path), lambda: connect_read_only(warehouse_dir)]
    for n, (opened, new_file) in enumerate(zip(opens, files[1:], strict=True), start=1):
        con = opened()
        try:
            assert con.sql(counts).fetchall() == [(n, n, n)]
            ingest([new_file], warehouse=warehouse_dir, job=f"b{n}")
            assert con.sql(counts).fetchall() == [(n, n, n)]  # one snapshot
        finally:
            con.close()
        assert query(warehouse_dir, counts) == [(n + 1,) * 3]  # a plain shell: the globs
    # the first half of a commit: an events file renamed in, its manifest row not yet written
    orphan = layout.events_dir / "job=c" / "rank=0" / ("0" * 64 + ".parquet")
    orphan.parent.mkdir(parents=True)
    shutil.copy(next(layout.events_dir.glob("job=a/rank=*/*.parquet")), orphan)
    con = connect(layout.catalog_path)
    try:
        assert con.sql(counts).fetchall() == [(3, 3, 3)]
        listed = con.execute("select getvariable('lumos_events_files')").fetchone()[0]
        assert str(orphan) not in listed  # the files of the manifest's ok rows only
    finally:
        con.close()
