"""A trace recorded without tensor shapes (the profiler's default, record_shapes=False) holds the
operators but not their sizes. Inference still counts the layers from the attention calls, and
the estimator refuses to start from a base whose hidden size, sequence and micro-batch are
defaults (hidden 1: before the rule, hidden x2 of such a trace was predicted at 85 s for a 15 ms
step) unless they are given; given, it estimates."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch_traces import TRUTH, record, require_torch


@pytest.fixture(scope="module")
def wh(tmp_path_factory) -> Path:
    require_torch()
    from warehouse.ingest import ingest

    tmp = tmp_path_factory.mktemp("noshapes")
    trace = record("plain", tmp / "traces", record_shapes=False)
    ingest([trace], warehouse=tmp / "wh", job="noshapes")
    return tmp / "wh"


def test_layers_are_counted_from_attention_calls_without_shapes(wh):
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base

    inf = infer_base(Warehouse.open(wh), "noshapes")
    assert inf.config.layers == TRUTH["layers"], inf.fields["layers"]
    assert inf.fields["layers"].source == "trace"
    assert set(inf.unread()) == {"hidden", "seq", "micro_batch"}
    assert any("without input shapes" in w for w in inf.warnings), inf.warnings


def test_estimate_refuses_unread_shapes_and_names_them(wh):
    from lumos.estimate.config import ConfigError
    from lumos.estimate.estimator import Estimator

    with pytest.raises(ConfigError, match=r"hidden .*seq .*micro_batch .*--base hidden=N seq=N"):
        Estimator.open(wh, "noshapes")


def test_estimate_with_the_shapes_given_starts_from_the_traced_step(wh):
    from lumos.api import Warehouse
    from lumos.estimate.estimator import Estimator

    given = {k: TRUTH[k] for k in ("hidden", "seq", "micro_batch", "heads", "ffn", "vocab")}
    e = Estimator.open(wh, "noshapes", given)
    assert e.base.hidden == TRUTH["hidden"]
    pred = e.predict([e.base])[0].predicted_ns
    step = Warehouse.open(wh).sql(
        "select median(dur_ns) as m from events where job = 'noshapes' "
        "and cat = 'user_annotation' and name like 'ProfilerStep#%'"
    )["m"][0]
    assert abs(pred - step) / step < 0.05, (pred, step)
    bigger = e.predict([e.target({"layers": 2 * TRUTH["layers"]})])[0].predicted_ns
    assert bigger > 1.3 * pred


def test_describe_and_estimate_cli_say_what_is_missing(wh):
    from cli_run import lumos

    r = lumos("estimate", "--job", "noshapes", "--set", "layers=6", "--warehouse", str(wh))
    assert r.returncode == 2
    assert "noshapes: the trace does not tell the base's hidden" in r.stderr
    assert "Traceback" not in r.stderr
