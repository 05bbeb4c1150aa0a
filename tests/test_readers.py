"""The trace readers against every real trace: counts and sampled rows checked with stdlib json.

Expected values come from the raw JSON text through `json.loads(..., parse_float=Decimal)`, never
from the reader: timestamps are µs × 1000 computed with Decimal, so a float64 shortcut anywhere in
the reader would fail on the ns-resolution traces.
"""

from __future__ import annotations

import gzip
import json
import os
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from warehouse.errors import MalformedTrace, NotKinetoTrace, TraceError
from warehouse.layout import SIDECAR_NAMES
from warehouse.readers import open_trace, sniff
from warehouse.schema import CATEGORY_ALIASES, READER_EVENTS

ROOT = Path(__file__).resolve().parent.parent
_SHARED = Path(os.environ.get("LUMOS_SHARED", ROOT.parent / "shared")) / "traces"

# Files in ../shared/traces that are not Kineto traces and must be refused.
NOT_KINETO = {
    "chakra/1.0.2-chakra.0.0.4.json.gz",
    "hta/execution_trace/benchmark_simple_add_et.json.gz",
    "hta/memory_analysis/memory_timeline.raw.gz",
    "param/linear/linear_et.json.gz",
    *(f"param/dlrm_8rank/et/dlrm_eg_{r}.json.gz" for r in range(8)),
}


def _trace_files(root: Path) -> list[str]:
    if not root.exists():
        return ["<shared traces missing>"]
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "LICENSES" not in p.parts and p.suffix != ".md"
    )


def _load_json(path: Path) -> object:
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        # floats stay as their exact text; Decimal is applied to sampled values only (speed)
        return json.loads(f.read(), parse_float=str)


def _ns(value: object) -> int | None:
    """µs (int or exact decimal text) → ns, exactly."""
    if value is None:
        return None
    ns = Decimal(value) * 1000
    assert ns == ns.to_integral_value(), f"{value} has digits below 1 ns"
    return int(ns)


def _int_part(v: object) -> int | None:
    if isinstance(v, int):
        return v
    digits = "".join(c if c.isdigit() else " " for c in v).split()
    return int(digits[0]) if digits else None


def _norm_cat(cat: str | None) -> str:
    return "" if cat is None else CATEGORY_ALIASES.get(cat, cat)


def check_against_json(path: Path, table: pa.Table) -> None:
    """Counts per normalised category and sampled rows must match an independent json parse."""
    doc = _load_json(path)
    events = doc["traceEvents"]
    assert table.num_rows == len(events)
    expected: dict[str, int] = {}
    for e in events:
        c = _norm_cat(e.get("cat"))
        expected[c] = expected.get(c, 0) + 1
    got = {r["values"]: r["counts"] for r in table.column("cat").value_counts().to_pylist()}
    assert got == expected

    n = len(events)
    sample = sorted({0, n - 1, *range(0, n, 97)})
    rows = table.take(pa.array(sample)).to_pylist()
    for idx, row in zip(sample, rows, strict=True):
        e = events[idx]
        where = f"{path.name} event {idx}"
        assert row["event_idx"] == idx, where
        assert row["ts_ns"] == _ns(e.get("ts")), where
        assert row["dur_ns"] == _ns(e.get("dur")), where
        assert row["name"] == e.get("name"), where
        assert row["ph"] == e.get("ph"), where
        assert row["cat_raw"] == e.get("cat"), where
        for key in ("pid", "tid"):
            v = e.get(key)
            if isinstance(v, str):
                assert row[f"{key}_label"] == v, where
                assert row[key] == _int_part(v), where
            else:
                assert row[key] == v and row[f"{key}_label"] is None, where
        args = e.get("args")
        if args is None:
            assert row["args_json"] is None, where
            continue
        assert json.loads(row["args_json"], parse_float=str) == args, where
        assert row["correlation"] == args.get("correlation"), where
        ext = args.get("External id", args.get("external id"))
        assert row["external_id"] == ext, where
        assert row["coll_name"] == args.get("Collective name"), where
        assert row["in_nelems"] == args.get("In msg nelems"), where
        assert row["group_size"] == args.get("Group size"), where
        dims = row["input_dims"]
        assert (json.loads(dims) if dims is not None else None) == args.get("Input Dims"), where
        if isinstance(args.get("stream"), int):
            assert row["stream"] == args["stream"], where


@pytest.mark.parametrize("rel", _trace_files(_SHARED))
def test_every_shared_trace_reads_or_is_refused(shared_traces: Path, rel: str) -> None:
    path = shared_traces / rel
    try:
        trace = open_trace(path)
        table = pa.Table.from_batches(list(trace.batches()), schema=READER_EVENTS)
    except TraceError as err:
        # the ground-truth runs' measured.json beside their traces (gpu_h100/*/), given
        # explicitly, is refused as the JSON it is (a directory walk skips it by name)
        assert rel in NOT_KINETO or Path(rel).name in SIDECAR_NAMES, f"{rel} refused: {err}"
        assert isinstance(err, NotKinetoTrace)
        assert str(path) in str(err)
        assert sniff(path)  # a description exists for the refusal
        return
    assert rel not in NOT_KINETO, f"{rel} is not a Kineto trace but was read"
    assert table.schema == READER_EVENTS
    check_against_json(path, table)
    meta = trace.meta
    assert meta.n_events == table.num_rows
    assert sum(meta.category_counts.values()) == table.num_rows
    if rel in EXPECTED_META:
        got = {k: getattr(meta, k) for k in EXPECTED_META[rel]}
        assert got == EXPECTED_META[rel]


# What the traces say about themselves (read off the files by hand).
EXPECTED_META = {
    "hta/df_index_resolver/df_index_resolver.json.gz": {
        "rank": 1,
        "world_size": 2,
        "device": "Tesla V100-SXM2-32GB",
        "trace_format": "kineto",
        "schema_version": "1",
        "n_events": 216092,
    },
    "kineto/resnet50_legacy_2021.pt.trace.json.gz": {
        "trace_format": "kineto-legacy",
        "device": "Tesla V100-DGXS-32GB",
        "rank": None,
    },
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz": {
        "device": "cpu",
        "rank": 34,
        "world_size": 300,
    },
    "hta/mtia_trace_single_rank/mtia_rank_0.json.gz": {"device": "mtia", "rank": 0},
    "hta/rank_unavailable/rank_not_found.json.gz": {"rank": None, "device": "cpu"},
    "tracelens/mi300x_ddp_resnet18_train.json.gz": {"device": "AMD Instinct MI300X"},
    "hta/trace_file_list/inference_rank_1.json.gz": {"trace_format": "kineto-legacy", "rank": 1},
}


# gpt_cpu/measured.json is the ground-truth trainer's measurement beside its trace, not a trace
@pytest.mark.parametrize(
    "rel",
    [r for r in _trace_files(ROOT / "examples" / "traces") if not r.endswith("measured.json")],
)
def test_bundled_examples_read_exactly(examples: Path, rel: str) -> None:
    path = examples / rel
    table = open_trace(path).read_all()
    check_against_json(path, table)


def test_legacy_string_tids(shared_traces: Path) -> None:
    legacy = open_trace(shared_traces / "kineto/resnet50_legacy_2021.pt.trace.json.gz")
    table = legacy.read_all()
    assert legacy.meta.category_counts["kernel"] == 8772
    streams = table.filter(pa.compute.equal(table.column("tid_label"), "stream 7"))
    assert streams.num_rows > 0 and set(streams.column("tid").to_pylist()) == {7}
    assert (
        json.loads(legacy.meta.top_level["deviceProperties"])[0]["name"] == "Tesla V100-DGXS-32GB"
    )


def test_ns_timestamps_keep_their_nanoseconds(shared_traces: Path) -> None:
    path = shared_traces / "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    table = open_trace(path).read_all()
    ts = table.column("ts_ns").drop_null().to_pylist()
    assert sum(1 for v in ts if v % 1000) > len(ts) // 2  # ns digits survived
    # float64 of the µs value would lose them: the reader must not agree with it
    raw = json.loads(gzip.open(path).read())["traceEvents"]
    as_float = [round(e["ts"] * 1000) for e in raw if isinstance(e.get("ts"), float)]
    assert as_float != ts[: len(as_float)]


def test_uint64_in_args_stays_in_args_json(shared_traces: Path) -> None:
    table = open_trace(
        shared_traces / "hta/large_integer_trace/rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"
    ).read_all()
    assert "10159970886766084423" in table.column("args_json")[1].as_py()


@pytest.mark.parametrize(
    ("rel", "small"),
    [
        ("hta/nccl_parser_config/nccl_data.json.gz", 4096),
        ("kineto/resnet50_legacy_2021.pt.trace.json.gz", 1 << 16),
        ("hta/call_stack/backward_thread.json", 7),
    ],
)
def test_tiny_chunks_give_the_same_table(shared_traces: Path, rel: str, small: int) -> None:
    path = shared_traces / rel
    whole = open_trace(path, chunk_bytes=1 << 30).read_all()
    chunked = open_trace(path, chunk_bytes=small).read_all()
    assert chunked.equals(whole)


def test_braces_and_escapes_inside_strings(tmp_path: Path) -> None:
    events = [
        {
            "ph": "X",
            "name": 'f({[x]}) "q" \\ }',
            "cat": "cpu_op",
            "pid": 1,
            "tid": 2,
            "ts": 1.5,
            "dur": 2,
            "args": {"s": "]}{[", "u": "µs \u2603 \U0001f600", "External id": 3},
        },
        {
            "ph": "X",
            "name": "tab\there\nnl",
            "cat": "kernel",
            "pid": 1,
            "tid": "stream 7",
            "ts": "TS",
            "dur": 0.001,
            "args": {"correlation": 9, "device": 0},
        },
        {"ph": "M", "name": "thread_name", "pid": "Spans", "tid": 0, "args": {"name": "x"}},
    ]
    text = json.dumps({"schemaVersion": 1, "traceEvents": events, "after": {"k": "}]"}})
    text = text.replace('"TS"', "1712345678901234.567")  # exact decimal text, not a float
    path = tmp_path / "t.json"
    path.write_text(text)
    reference = None
    for chunk in (1, 2, 3, 5, 8, 13, 64, 1 << 20):
        trace = open_trace(path, chunk_bytes=chunk)
        table = trace.read_all()
        check_against_json(path, table)
        assert trace.meta.top_level["after"] == '{"k": "}]"}'
        reference = reference or table
        assert table.equals(reference)
    rows = reference.to_pylist()
    assert rows[1]["ts_ns"] == 1712345678901234567 and rows[1]["dur_ns"] == 1
    assert rows[1]["tid"] == 7 and rows[1]["tid_label"] == "stream 7"
    assert rows[2]["pid"] is None and rows[2]["pid_label"] == "Spans"
    assert rows[0]["name"] == 'f({[x]}) "q" \\ }'


def test_keys_written_with_escapes_are_the_keys_json_reads(tmp_path: Path) -> None:
    """JSON lets any key character be escaped: "n\\u0061me" is "name" to every parser."""
    text = (
        '{"traceEvents": [{"ph": "X", "cat": "cpu_op", "n\\u0061me": "aten::mm", "pid": 1, '
        '"tid": 2, "t\\u0073": 10, "d\\u0075r": 3, "args": {"External\\u0020id": 5, '
        '"\\u0045xternal id\\u00e9": 6}}, {"ph": "X", "name\\n": "no", "name": "k", "pid": 1, '
        '"tid": 2, "ts": 11, "dur": 1}]}'
    )
    path = tmp_path / "t.json"
    path.write_text(text)
    for chunk in (1, 7, 1 << 20):
        table = open_trace(path, chunk_bytes=chunk).read_all()
        check_against_json(path, table)
    rows = table.to_pylist()
    assert [r["name"] for r in rows] == ["aten::mm", "k"]
    assert rows[0]["ts_ns"] == 10_000 and rows[0]["dur_ns"] == 3_000


def test_malformed_is_a_trace_error() -> None:
    assert issubclass(MalformedTrace, TraceError) and issubclass(NotKinetoTrace, TraceError)
