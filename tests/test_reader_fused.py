"""The fused validating pass (`warehouse.readers.fused`) against the standard `json` module.

A randomized corpus of event objects, valid and mutated (truncations, swapped or deleted bytes,
stray commas, bad escapes, leading zeros, NaN/Infinity, ...), wrapped in a trace: the pass must
accept exactly the documents `json.loads` accepts (every traceEvents element an object), plus
those whose only departure is a non-finite number spelled as C++ writes it (`inf`, `-inf`, `nan`,
`-nan`, `-NaN`: Kineto wrote them; `json` reads only NaN, Infinity and -Infinity), and for accepted
ones the recorded spans must hold the values `json` reads for the kept keys. Plus the reader's
message for invalid JSON inside an event.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from warehouse.errors import MalformedTrace
from warehouse.readers import fused, open_trace
from warehouse.readers.walker import ARGS_KEYS, EVENT_KEYS, FIELD

_SCALARS = (
    hs.none()
    | hs.booleans()
    | hs.integers(min_value=-(2**70), max_value=2**70)
    | hs.floats(allow_nan=False, allow_infinity=False)
    | hs.text(max_size=8)
)
_VALUES = hs.recursive(
    _SCALARS,
    lambda inner: (
        hs.lists(inner, max_size=3) | hs.dictionaries(hs.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_ARGS = hs.dictionaries(hs.sampled_from(ARGS_KEYS) | hs.text(max_size=5), _VALUES, max_size=5)
_EVENT = hs.dictionaries(
    hs.sampled_from(EVENT_KEYS) | hs.text(max_size=5),
    _VALUES,
    max_size=6,
).flatmap(lambda ev: _ARGS.map(lambda a: {**ev, "args": a}) if "args" in ev else hs.just(ev))
# Bytes that matter to the grammar, for insertions and replacements.
_ALPHABET = b'{}[]:,"\\/ \t\n0123456789-+.eEtrufalsnNIxyu\x01\x1f'


def _text(ev: dict, spaced: bool) -> str:
    return json.dumps(ev, ensure_ascii=False, indent=1 if spaced else None)


@hs.composite
def _mutated(draw) -> bytes:
    """One or more event objects' text, possibly broken in one or a few places."""
    events = draw(hs.lists(_EVENT, min_size=1, max_size=3))
    text = ",".join(_text(e, draw(hs.booleans())) for e in events).encode()
    for _ in range(draw(hs.integers(0, 2))):
        if not text:
            break
        kind = draw(hs.integers(0, 8))
        at = draw(hs.integers(0, len(text) - 1))
        if kind == 0:  # truncation
            text = text[:at]
        elif kind == 1 and at + 1 < len(text):  # swapped bytes
            text = text[:at] + text[at + 1 : at + 2] + text[at : at + 1] + text[at + 2 :]
        elif kind == 2:  # deleted byte
            text = text[:at] + text[at + 1 :]
        elif kind == 3:  # stray comma
            text = text[:at] + b"," + text[at:]
        elif kind == 4:  # an escape, valid or not
            esc = draw(hs.sampled_from([b"\\x", b"\\u12", b"\\u12g4", b"\\'", b"\\n", b"\\u00e9"]))
            text = text[:at] + esc + text[at:]
        elif kind == 5:  # leading zeros, bad numbers
            num = draw(hs.sampled_from([b"01", b"-0", b"1.", b".5", b"1e", b"-", b"1e+5", b"00"]))
            text = text[:at] + num + text[at:]
        elif kind == 6:  # non-JSON constants, broken literals
            lit = draw(
                hs.sampled_from(
                    [b"NaN", b"Infinity", b"-Infinity", b"inf", b"-inf", b"nan", b"-nan"]
                    + [b"-NaN", b"tru", b"nul", b"Infinit", b"na", b"-i", b"NaX"]
                )
            )
            text = text[:at] + lit + text[at:]
        else:  # any grammar byte inserted or replacing one
            b = bytes([draw(hs.sampled_from(_ALPHABET))])
            text = text[:at] + b + text[at + (kind == 7) :]
    return text


# the non-finite spellings the reader takes and `json` does not
_CPP_NONFINITE = (b"inf", b"nan", b"-NaN")


def _json_accepts(doc: bytes) -> dict | None:
    try:
        value = json.loads(doc.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    if not all(isinstance(e, dict) for e in value["traceEvents"]):
        return None
    return value


def _utf8(doc: bytes) -> bool:
    """The reader's own UTF-8 check (the fused pass leaves it to the caller)."""
    try:
        doc.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _scan(doc: bytes) -> tuple[int, fused.Scanner, np.ndarray]:
    buf = np.frombuffer(doc, dtype=np.uint8)
    scanner = fused.Scanner(1 << 16)
    rc = scanner.scan(buf)
    return rc, scanner, buf


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_accepts_exactly_what_json_accepts(events: bytes) -> None:
    doc = b'{"traceEvents": [' + events + b"]}"
    expected = _json_accepts(doc)
    rc, scanner, buf = _scan(doc)
    complete = rc == 0 and int(scanner.state[fused.S_PHASE]) == fused.P_END and _utf8(doc)
    if complete and expected is None:  # only a C++ spelling of a non-finite number may differ
        assert any(w in doc for w in _CPP_NONFINITE), (doc, rc, scanner.state)
        return
    assert complete == (expected is not None), (doc, rc, scanner.state)
    if expected is None:
        return
    starts, ends, _ = scanner.spans()
    assert starts.shape[0] == len(expected["traceEvents"])
    for row, event in enumerate(expected["traceEvents"]):
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        for keys, values in ((EVENT_KEYS, event), (ARGS_KEYS, args)):
            for key in keys:
                s, e = starts[row, FIELD[key]], ends[row, FIELD[key]]
                if key not in values:
                    assert s == -1, (doc, key)
                    continue
                got = json.loads(bytes(buf[s:e]).decode())
                assert got == values[key] or (got != got and values[key] != values[key])


@given(_mutated(), hs.integers(1, 64))
@settings(max_examples=150, deadline=None)
def test_verdict_does_not_depend_on_buffer_boundaries(events: bytes, cut: int) -> None:
    """Fed in two pieces (the second after the first's unfinished tail), as the reader does."""
    doc = b'{"traceEvents": [' + events + b"]}"
    whole, ref, _ = _scan(doc)
    ref_ok = whole == 0 and int(ref.state[fused.S_PHASE]) == fused.P_END
    cut = min(cut, len(doc))
    scanner = fused.Scanner(1 << 16)
    rc = scanner.scan(np.frombuffer(doc[:cut], dtype=np.uint8))
    if rc == 0:
        rest = doc[int(scanner.state[fused.S_CLEAN]) :]
        rc = scanner.scan(np.frombuffer(rest, dtype=np.uint8))
    ok = rc == 0 and int(scanner.state[fused.S_PHASE]) == fused.P_END
    assert ok == ref_ok, doc


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b'"na\\qme"', "invalid escape"),
        (b'"na\\u00zz"', "invalid escape"),
        (b"012", "unexpected character"),
        (b"NaX", "invalid literal"),
        (b"-Infinit ", "invalid literal"),
        (b'"a"  "b"', "unexpected character"),
        (b'"tab\there"', "control character"),
    ],
)
@pytest.mark.parametrize("chunk_bytes", [1 << 20, 700])
def test_invalid_event_names_file_element_and_byte(
    tmp_path: Path, bad: bytes, reason: str, chunk_bytes: int
) -> None:
    events = [b'{"ph": "X", "name": "ok%d", "ts": %d}' % (k, k) for k in range(40)]
    events[27] = b'{"ph": "X", "name": ' + bad + b', "ts": 5}'
    doc = b'{"schemaVersion": 1, "traceEvents": [\n' + b",\n".join(events) + b"\n]}"
    p = tmp_path / "bad.json"
    p.write_bytes(doc)
    with pytest.raises(MalformedTrace) as info:
        open_trace(p, chunk_bytes=chunk_bytes).read_all()
    msg = str(info.value)
    assert str(p) in msg
    assert "invalid JSON in traceEvents element 27 " in msg, msg
    assert reason in msg, msg
    # the offending byte lies within the bad value
    at = int(msg.split(" at byte ")[1].split(":")[0])
    value_at = doc.index(bad)
    assert value_at <= at < value_at + len(bad), msg


def test_span_capacity_full_resumes(tmp_path: Path) -> None:
    """More events in one buffer than the span arrays hold: the pass stops and resumes."""
    events = [{"ph": "i", "name": f"e{k}", "ts": k, "pid": 1, "tid": k % 3} for k in range(5000)]
    p = tmp_path / "many.json"
    p.write_text(json.dumps({"traceEvents": events}))
    chunk = 1 << 16  # ~1,400 events of ~45 bytes per buffer, capacity 1,024 rows at first
    table = open_trace(p, chunk_bytes=chunk).read_all()
    assert table.column("name").to_pylist() == [e["name"] for e in events]
    assert table.column("event_idx").to_pylist() == list(range(len(events)))
    assert table.column("ts_ns").to_pylist() == [e["ts"] * 1000 for e in events]
