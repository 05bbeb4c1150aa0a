"""`columns.convert` routes each value an event holds to its columns, and only those.

It visits the fields present in a row rather than every column, so the routing itself is what
can go wrong: a field feeding two columns (`pid` is the integer pid and the `pid_label`), a
fallback key taken only when its primary is absent (`external id`, `seq`), values that are
present but null or of another type, string offsets carried over null rows, and which error a
row with several bad values reports. Each is checked against a column-by-column pass written
here with the same per-value rules (`numbers.int_value`, `strings.str_value`), on random events
whose fields are each absent, null, or of a random JSON type.
"""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as hs

from warehouse.readers import fused
from warehouse.readers.columns import run
from warehouse.readers.decode import _PLAN
from warehouse.readers.numbers import int_value
from warehouse.readers.strings import str_value
from warehouse.readers.walker import FIELD, KEYS, N_EVENT_KEYS

_VALUES = (
    hs.none()
    | hs.integers(-(2**40), 2**40)
    | hs.sampled_from(["7", "stream 7", "0x1f", "abé", "", "-3", "x"])
    | hs.sampled_from([[1, 2], {"a": 1}, True, 1.5, "1e3"])
)
_ABSENT = object()
_EVENT = hs.fixed_dictionaries({k: hs.just(_ABSENT) | _VALUES for k in KEYS[:N_EVENT_KEYS]})
_ARGS = hs.fixed_dictionaries({k: hs.just(_ABSENT) | _VALUES for k in KEYS[N_EVENT_KEYS:]})


def _doc(events: list[tuple[dict, dict]]) -> bytes:
    out = []
    for ev, args in events:
        body = {k: v for k, v in ev.items() if v is not _ABSENT and k != "args"}
        if ev.get("args", _ABSENT) is not _ABSENT:
            body["args"] = {k: v for k, v in args.items() if v is not _ABSENT}
        out.append(body)
    return json.dumps({"traceEvents": out}).encode()


def _spans(doc: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    buf = np.frombuffer(doc, dtype=np.uint8)
    scanner = fused.Scanner(1 << 16)
    assert scanner.scan(buf) == 0
    starts, ends, totals = scanner.spans()
    return buf, starts.copy(), ends.copy(), totals.copy()


def _reference(buf, starts, ends) -> tuple[dict[str, list], tuple[int, int, int]]:
    """Every column, one cell at a time in column order (ints, then strings)."""
    p = _PLAN
    n = starts.shape[0]
    cols: dict[str, list] = {name: [] for name in p.int_names + p.str_names}
    scratch = np.zeros(len(buf) + 8, dtype=np.uint8)
    for k in range(n):
        for c, name in enumerate(p.int_names):
            f = int(p.int_f[c])
            if starts[k, f] < 0 and p.int_alt[c] >= 0:
                f = int(p.int_alt[c])
            v, ok, code = int_value(buf, starts[k, f], ends[k, f], p.int_scale[c], p.int_mode[c])
            if code:
                return cols, (k, f, code)
            cols[name].append(int(v) if ok else None)
        for c, name in enumerate(p.str_names):
            f = int(p.str_f[c])
            if starts[k, f] < 0 and p.str_alt[c] >= 0:
                f = int(p.str_alt[c])
            o, ok, code = str_value(buf, starts[k, f], ends[k, f], p.str_mode[c], scratch, 0)
            if code:
                return cols, (k, f, code)
            cols[name].append(bytes(scratch[:o]).decode() if ok else None)
    return cols, (-1, -1, 0)


@settings(max_examples=300, deadline=None)
@given(events=hs.lists(hs.tuples(_EVENT, _ARGS), min_size=1, max_size=8))
def test_sparse_routing_matches_a_column_by_column_pass(events: list) -> None:
    buf, starts, ends, totals = _spans(_doc(events))
    expected, expected_error = _reference(buf, starts, ends)
    got, error = run(_PLAN, buf, starts, ends, totals)
    assert error == expected_error
    if error[0] >= 0:
        return
    for name, values in expected.items():
        assert got[name].to_pylist() == values, name


def test_a_fallback_key_is_read_only_without_its_primary() -> None:
    doc = _doc(
        [
            ({"args": {}}, {"External id": 5, "external id": 9}),
            ({"args": {}}, {"external id": 9, "seq": 4}),
            ({"args": {}}, {"External id": None, "external id": 9, "Seq": 1, "seq": 4}),
        ]
    )
    got, error = run(_PLAN, *_spans(doc))
    assert error == (-1, -1, 0)
    assert got["external_id"].to_pylist() == [5, 9, None]
    assert got["seq"].to_pylist() == [None, 4, 1]


def test_the_first_bad_value_of_a_row_is_reported_in_column_order() -> None:
    # `name` (a string column) comes before `ts` (an integer column) among the fields, after it
    # among the columns: the row's error names `ts`, as a column-by-column pass meets it first
    doc = _doc([({"name": "ok", "args": _ABSENT}, {}), ({"name": 5, "ts": "x"}, {})])
    _, (row, field, _) = run(_PLAN, *_spans(doc))
    assert (row, KEYS[field]) == (1, "ts")
    assert FIELD["name"] < FIELD["ts"]
