"""Values the reader converts (`numbers`, `strings`, via `columns.convert`) against exact references.

Timestamps as JSON number text of every shape (integers of 1 to 19 digits, fractions, exponents,
signs) must come out as the exact nanoseconds `Decimal` computes, rounded half to even below
1 ns; names written with and without escapes at any position (the copy works 8 bytes at a time,
so escapes before, inside and after a word boundary) must come out as `json` reads them; `args`
must be kept byte for byte.
"""

from __future__ import annotations

import json
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from warehouse.errors import MalformedTrace
from warehouse.readers import open_trace

_INT64_MAX = 2**63 - 1


@hs.composite
def _number_text(draw) -> str:
    sign = draw(hs.sampled_from(["", "", "-"]))
    digits = draw(hs.integers(1, 19))
    first = draw(hs.integers(1, 9)) if digits > 1 else draw(hs.integers(0, 9))
    rest = "".join(str(draw(hs.integers(0, 9))) for _ in range(digits - 1))
    text = sign + str(first) + rest
    if draw(hs.booleans()):
        text += "." + "".join(str(draw(hs.integers(0, 9))) for _ in range(draw(hs.integers(1, 9))))
    if draw(hs.integers(0, 4)) == 0:
        text += draw(hs.sampled_from(["e", "E"])) + draw(hs.sampled_from(["", "+", "-"]))
        text += str(draw(hs.integers(0, 25)))
    return text


def _ns(text: str) -> int | None:
    """µs text → ns, exact, half to even below 1 ns; None where int64 cannot hold it."""
    v = (Decimal(text) * 1000).to_integral_value(rounding=ROUND_HALF_EVEN)
    return int(v) if abs(v) <= _INT64_MAX else None


_NAMES = hs.text(
    alphabet=hs.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40
) | hs.text(alphabet='ab"\\/\n\t\x01é€😀', max_size=40)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=hs.lists(
        hs.tuples(
            _number_text(),
            _NAMES,
            hs.booleans(),
            hs.dictionaries(hs.text(max_size=4), hs.integers() | hs.text(max_size=12), max_size=3),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_numbers_and_strings_are_exact(tmp_path: Path, rows: list) -> None:
    rows = [r for r in rows if _ns(r[0]) is not None]
    if not rows:
        return
    texts = []
    for ts, name, ascii_only, args in rows:
        args_text = json.dumps(args, ensure_ascii=ascii_only)
        name_text = json.dumps(name, ensure_ascii=ascii_only)
        texts.append(
            f'{{"ph": "X", "cat": "cpu_op", "name": {name_text}, "ts": {ts}, "dur": 1, '
            f'"pid": 1, "tid": 1, "args": {args_text}}}'
        )
    path = tmp_path / "values.json"
    path.write_text('{"traceEvents": [' + ",".join(texts) + "]}", encoding="utf-8")
    table = open_trace(path).read_all()
    assert table.column("ts_ns").to_pylist() == [_ns(r[0]) for r in rows]
    assert table.column("name").to_pylist() == [r[1] for r in rows]
    assert [json.loads(a) for a in table.column("args_json").to_pylist()] == [r[3] for r in rows]
    raw = [json.dumps(r[3], ensure_ascii=r[2]) for r in rows]
    assert table.column("args_json").to_pylist() == raw


# integer parts longer than int64's 19 digits, brought back in range by the exponent (and a few
# that stay beyond it): the mantissa keeps what it holds and the rest rounds, as for fractions
_LONG = [
    "9300000000000000000e-4",
    "92233720368547758079e-5",
    "12345678901234567890123456789e-15",
    "9223372036854775807999e-7",
    "-99999999999999999999.5e-10",
    "10000000000000000000000e-7",
    "12345678901234567890500e-7",
    "12345678901234567891500e-7",
]
_BEYOND = ["9300000000000000000", "9300000000000000000e-2", "9223372036854775807999e-6"]


def _one_event(tmp_path: Path, ts: str) -> Path:
    path = tmp_path / "long.json"
    path.write_text(f'{{"traceEvents": [{{"ph": "X", "name": "a", "ts": {ts}, "dur": 1}}]}}')
    return path


@pytest.mark.parametrize("text", _LONG)
def test_long_mantissas_in_range_are_exact(tmp_path: Path, text: str) -> None:
    want = _ns(text)
    assert want is not None
    assert open_trace(_one_event(tmp_path, text)).read_all().column("ts_ns").to_pylist() == [want]


@pytest.mark.parametrize("text", _BEYOND)
def test_long_mantissas_beyond_int64_are_refused(tmp_path: Path, text: str) -> None:
    assert _ns(text) is None
    with pytest.raises(MalformedTrace, match="outside the signed 64-bit range"):
        open_trace(_one_event(tmp_path, text)).read_all()
