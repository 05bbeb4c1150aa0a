"""Inference on what plain training scripts record (no annotations; tests/torch_traces.py):
mixed precision, whose ops torch.autocast records twice (an outer call at the caller's dtype
around the inner one at bf16), and activation checkpointing, whose forward is replayed inside
the backward. Neither may read as extra layers: before the rule, both traces read as 6 layers
and every estimate of them came out ~70% slow. The estimate of the inferred configuration
itself must reproduce the traced median step (the template is that step)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch_traces import GQA_KV_HEADS, TRUTH, VARIANTS, record, require_torch

EXPECTED = {
    "plain": dict(dtype_bytes=4, recompute="none"),
    "bf16": dict(dtype_bytes=2, recompute="none"),
    "full": dict(dtype_bytes=4, recompute="full"),
    "reentrant": dict(dtype_bytes=4, recompute="full"),
    "selective": dict(dtype_bytes=4, recompute="selective"),
    "tanh_gelu": dict(dtype_bytes=4, recompute="none"),
    "conv1d": dict(dtype_bytes=4, recompute="none"),
    "math_attn": dict(dtype_bytes=4, recompute="none"),
    "gqa_full": dict(dtype_bytes=4, recompute="full", kv_heads=GQA_KV_HEADS),
}


@pytest.fixture(scope="module")
def variants_wh(tmp_path_factory) -> Path:
    """One job per variant, each recorded now (~1 s each)."""
    require_torch()
    from warehouse.ingest import ingest

    tmp = tmp_path_factory.mktemp("variants")
    for v in VARIANTS:
        ingest([record(v, tmp / "traces" / v)], warehouse=tmp / "wh", job=v)
    return tmp / "wh"


@pytest.mark.parametrize("variant", VARIANTS)
def test_variant_config_is_recovered(variants_wh, variant):
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base

    inf = infer_base(Warehouse.open(variants_wh), variant)
    got = {k: getattr(inf.config, k) for k in (*TRUTH, *EXPECTED[variant])}
    assert got == {**TRUTH, **EXPECTED[variant]}, inf.fields


def test_checkpointed_fused_qkv_reads_its_key_value_heads(variants_wh):
    """The fused QKV GEMM (hidden -> hidden + 2 K/V widths) counts its forward calls like the
    attention op does: their replays inside the backward (checkpointing) are counted apart in
    both. Subtracting the replays from the attention calls alone had left 0 calls to match."""
    from lumos.api import Warehouse
    from lumos.estimate.infer import infer_base

    ev = infer_base(Warehouse.open(variants_wh), "gqa_full").fields["kv_heads"]
    h, kvw = TRUTH["hidden"], GQA_KV_HEADS * TRUTH["hidden"] // TRUTH["heads"]
    assert ev.value == GQA_KV_HEADS and f"fused QKV projection {h}→{h + 2 * kvw}" in ev.evidence


@pytest.mark.parametrize("variant", VARIANTS)
def test_estimate_of_the_traced_configuration_is_the_traced_step(variants_wh, variant):
    from lumos.api import Warehouse
    from lumos.estimate.estimator import Estimator

    e = Estimator.open(variants_wh, variant)
    p = e.predict([e.base])[0]
    pred = p.predicted_ns
    steps = Warehouse.open(variants_wh).sql(
        "select median(dur_ns) as m, max(dur_ns) - min(dur_ns) as spread from events "
        "where job = $job and cat = 'user_annotation' and name like 'ProfilerStep#%'",
        {"job": variant},
    )
    measured = float(steps["m"][0])
    # but for the speed the other runs at its state say a new run has (its CPU work only)
    speed = e.working_set.run_speed
    # a checkpointed step's replay of the forward is re-created from the forward's ops (the
    # template holds none, so that targets may differ in `recompute`): within the difference
    # between a replay and the forward it repeats, 5 %, plus half the spread of this recording's
    # steps (the same ops run at another moment: gqa_full, 4 steps spread 3-8 %, came out
    # +0.6 to +5.3 % over four recordings on a busy machine)
    tol = 0.02
    if EXPECTED[variant]["recompute"] != "none":
        tol = 0.05 + float(steps["spread"][0]) / measured / 2
    lo, hi = min(1.0, speed) - tol, max(1.0, speed) + tol
    assert lo < pred / measured < hi, (pred, measured, speed)
    # a speed is explained unless it is within 0.1 % of 1 (WorkingSet.run_notes says nothing
    # there: this test's runs, recorded at test time, can land as close as 1.0009)
    said = any("new run's CPU work" in w for w in p.warnings)
    assert said or abs(e.working_set.offset) < 1e-3, (speed, p.warnings)


def test_a_compiled_step_is_refused_with_the_reason():
    """torch.compile fuses a step's operators into regions (Dynamo's `Torch-Compiled Region`,
    AOTAutograd's `CompiledFunction`): no per-layer operators are left to repeat, and the error
    says so instead of reporting missing attention operators."""
    from lumos.estimate.template import TemplateError, _period_layers

    names = ["TorchDynamo Cache Lookup", "Torch-Compiled Region: 0/0", "aten::add_"]
    rows = [{"name": n} for n in names]
    with pytest.raises(TemplateError, match="torch.compile'd graphs .*Torch-Compiled Region"):
        _period_layers(rows, list(range(len(rows))), "job")


def test_the_fleet_matches_ops_at_their_dtype(variants_wh):
    """The calibration jobs' op-speed comparison (estimate/job_speed.sql) keys ops by name, shapes and
    dtypes: the bf16 job's GEMMs and attention have the fp32 job's shapes but run other kernels,
    so most of its op time finds no match; the fp32 checkpointed job matches almost all of its
    time. Keyed by shapes alone, the bf16 job matched ~90% of its time, and a
    warehouse holding both slowed every estimate of the fp32 job (the share is the matched
    time over the job's op time, estimate/job_speed.sql)."""
    from lumos.api import Warehouse
    from lumos.estimate.calibration_sql import calibration_rows

    (rows,), why = calibration_rows(Warehouse.open(variants_wh), ["job_speed"], "plain")
    assert why is None, why
    share = {job: s for job, _ratio, _keys, s in rows}
    assert share["full"] > 0.9 and share["bf16"] < 0.5, share


def test_a_base_that_disagrees_with_the_traced_layers_is_warned(variants_wh):
    """The template is the traced step: a base configuration with another layer count (a wrong
    `--base`, or a miscounted trace) makes every estimate start from a configuration that was
    not traced, and each estimate says so."""
    from lumos.estimate.estimator import Estimator

    right = Estimator.open(variants_wh, "plain")
    [p] = right.predict([right.base.replace(layers=6)])
    assert not [w for w in p.warnings if "layer(s) per stage" in w], p.warnings
    wrong = Estimator.open(variants_wh, "plain", base_overrides={"layers": 5})
    [p] = wrong.predict([wrong.base.replace(layers=6)])
    assert any("holds 3 layer(s) per stage" in w and "--base layers=3" in w for w in p.warnings)


def test_unnamed_ops_on_an_activation_scale_with_it(variants_wh):
    """GPT-2's GELU is pow, tanh, mul and add on the MLP's activation: no op is named gelu. By
    shape (their input holds tokens x FFN elements) they take the FFN activation's role, forward
    and backward, instead of keeping their traced time at every size."""
    from lumos.estimate.estimator import Estimator
    from lumos.estimate.template import ROLE

    tpl = Estimator.open(variants_wh, "tanh_gelu").tpl
    roles = {}
    for name, role in zip(tpl.names, tpl.role, strict=True):
        roles.setdefault(name, set()).add(int(role))
    for name in (
        "aten::pow",
        "aten::tanh",
        "autograd::engine::evaluate_function: PowBackward0",
        "autograd::engine::evaluate_function: TanhBackward0",
    ):
        assert roles.get(name) == {ROLE["tok_f"]}, (name, roles.get(name))
    # the plain model's named GELU has that role by name
    plain = Estimator.open(variants_wh, "plain").tpl
    gelu = {int(r) for n, r in zip(plain.names, plain.role, strict=True) if n == "aten::gelu"}
    assert gelu == {ROLE["tok_f"]}


def test_attention_on_the_math_path_is_its_own_kernel(variants_wh):
    """With dropout, scaled_dot_product_attention takes the math path at the same name, shapes
    and dtypes as the fused kernel: the calibration jobs must not compare the two (estimate/calibration_jobs.sql,
    foreign_attention), and its backward of score-sized nodes follows s^2 entirely."""
    import duckdb

    import lumos_sql
    from lumos.api import Warehouse
    from lumos.estimate.calibration_sql import calibration_rows
    from lumos.estimate.estimator import Estimator

    con = duckdb.connect(str(Warehouse.open(variants_wh).catalog), read_only=True)
    con.execute(lumos_sql.load("estimate/calibration_jobs"))
    foreign = {j for (j,) in con.execute("from foreign_attention('plain', [])").fetchall()}
    con.close()
    assert foreign == {"math_attn"}, foreign
    (samples,), why = calibration_rows(Warehouse.open(variants_wh), ["op_samples"], "plain")
    assert why is None, why
    attn = {job for name, _dims, job, _n, _med in samples if "attention" in name.lower()}
    assert "plain" in attn and "math_attn" not in attn, attn
    assert Estimator.open(variants_wh, "math_attn").attn_share == 1.0
    assert Estimator.open(variants_wh, "plain").attn_share < 1.0
