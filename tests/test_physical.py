"""Shipped calibration stays physical: batch-1 decode is memory-bound on every accelerator, round
maturity factors never make a newer round slower, and no fitted value sits outside its range.

Since the refit of 2026-11-25 the small-GEMM knee is no longer fitted (``gemm_m_half`` at its
documented 32 rows on every profile; the fitted 136-906 rows made batch-1 GEMMs compute-bound on
11 of 17 profiles): the slowness of decode GEMMs near the ridge point is ``gemm_overlap`` and the
experts' slow weight stream ``moe_memory_fraction``, neither of which can make a GEMV
compute-bound. The round factors of the shipped fit are monotone."""

from __future__ import annotations

import pytest

from infersim import api
from infersim.accuracy import params as acc_params
from infersim.accuracy.data import version_key
from infersim.engine import step_cost
from infersim.graph import Layout, Shape
from infersim.optimizations.presets import list_rounds, load_preset
from infersim.specs import catalog


@pytest.mark.parametrize("hw_id", catalog.list_ids("hardware"))
def test_the_knee_is_not_fitted(hw_id):
    """Every profile keeps the knee at its documented default (about one small tile of rows)."""
    assert catalog.load_hardware(hw_id).efficiency.gemm_m_half == 32.0


@pytest.mark.parametrize("hw_id,model", [(h, m) for m in ("llama3.1-8b", "llama2-70b")
                                         for h in catalog.list_ids("hardware")])
def test_batch_one_decode_is_memory_bound(hw_id, model):
    """One sequence decoding reads every weight once for one token: the weight stream, not the
    FLOPs, sets its time on every accelerator (arithmetic intensity ~2 FLOP/B at fp8 against
    ridge points of hundreds), whatever the fitted efficiencies."""
    hw = catalog.load_hardware(hw_id)
    n = 8 if model == "llama2-70b" else 1
    pred = api.predict(hw_id, model, f"mlperf-{model}-server", n, round="v5.1", tp=n, batch=1, disable=["disagg"])
    assert pred.result is not None, pred.reason
    shape = Shape(decode_seqs=1.0, decode_ctx=1024.0)
    cost = step_cost(pred.result.plan, Layout(tp=n), shape, detail=True)
    gemm = {k: v for k, v in cost.by_op.items() if cost.op_info[k][0] == "gemm" and float(v) > 0}
    assert gemm
    bound = {k: cost.op_info[k][1] for k in gemm}
    assert set(bound.values()) == {"memory"}, f"{hw_id}: compute-bound GEMMs at batch 1: {bound}"
    assert float(cost.memory_bound) > float(cost.compute_bound), hw.name


def test_shipped_round_factors_are_monotone():
    values = {r: {n: float(getattr(load_preset(r), n)) for n in acc_params.ROUND_FACTORS} for r in list_rounds()}
    assert sorted(values, key=version_key) == list_rounds()
    assert acc_params.monotone_violations(values) == []


def test_shipped_round_factors_inside_their_ranges():
    """A round's factor is its neighbour's times improvement steps; the chain must not carry it out
    of its documented range (v4.0's host factor was 7.93 of 0-5 until 2026-11-26)."""
    for r in list_rounds():
        for name, f in acc_params.ROUND_FACTORS.items():
            v = float(getattr(load_preset(r), name))
            assert f.range.lower <= v <= f.range.upper, f"{r}.{name} = {v} outside {f.range.lower}-{f.range.upper}"


def test_round_chain_values_stay_inside_the_range():
    """``round_values`` clamps a factor the improvement steps would carry past its range."""
    steps = [acc_params.Parameter("step", "v4.1", "host_overhead_scale", 1.0, 2.0, 2.0, 1.0, "v5.0"),
             acc_params.Parameter("step", "v4.0", "host_overhead_scale", 1.0, 2.0, 2.0, 1.0, "v4.1")]
    out = acc_params.round_values(steps, [2.0, 2.0], {"host_overhead_scale": 2.0}, "v5.0")
    assert out["v4.1"]["host_overhead_scale"] == 4.0
    assert out["v4.0"]["host_overhead_scale"] == acc_params.ROUND_FACTORS["host_overhead_scale"].range.upper


@pytest.mark.parametrize("hw_id", catalog.list_ids("hardware"))
def test_shipped_hardware_parameters_inside_their_ranges(hw_id):
    eff = catalog.load_hardware(hw_id).efficiency
    for name, rng in acc_params.HARDWARE_RANGES.items():
        v = float(getattr(eff, name))
        assert rng.lower <= v <= rng.upper, f"{hw_id}.{name} = {v} outside {rng.lower}-{rng.upper} {rng.unit}"


UNRECORDED: dict[str, str] = {}
"""Shipped values on a bound whose calibration record predates findings (none since the refit of
2026-11-25: every value on a bound carries its finding)."""


@pytest.mark.parametrize("hw_id", [pytest.param(h, marks=pytest.mark.xfail(strict=True, reason=UNRECORDED[h]))
                                   if h in UNRECORDED else h for h in catalog.list_ids("hardware")])
def test_a_shipped_value_on_a_bound_is_a_recorded_finding(hw_id):
    """A fitted value within BOUND_TOLERANCE of its range's bound says the model misses a
    mechanism there; the profile must carry that finding in its calibration record."""
    eff = catalog.load_hardware(hw_id).efficiency
    record = eff.calibration
    if record is None:
        pytest.skip("not calibrated")
    for name in record.parameters:
        rng = acc_params.HARDWARE_RANGES.get(name)
        if rng is None:
            continue
        x = (float(getattr(eff, name)) - rng.lower) / (rng.upper - rng.lower)
        if x <= acc_params.BOUND_TOLERANCE or x >= 1 - acc_params.BOUND_TOLERANCE:
            assert any(f"{hw_id}.{name}" in f for f in record.findings), f"{hw_id}.{name} on a bound, not recorded"


GPU_PROFILES = tuple(h for h in catalog.list_ids("hardware") if catalog.load_hardware(h).vendor in ("NVIDIA", "AMD"))
"""The GPU profiles (the TPUs and Gaudi run no MLA kernel of their own)."""


@pytest.mark.parametrize("hw_id", GPU_PROFILES)
def test_mla_decode_runs_at_its_own_documented_kernel_efficiency(hw_id):
    """The absorbed MLA decode core is its own kernel (FlashMLA-class: all heads of a token share
    one latent, ~2·H FLOPs per KV byte, compute-bound) at a documented share of peak, not the
    prefill attention efficiency the dense models fit: held out by model, DeepSeek-R1's decode
    borrowed 0.28-0.5 from Llama prefill on Blackwell (DeepSeek-R1 fold 31 % → 16 %, 2026-11-27).
    It is never a fitted parameter, so no fit can move it."""
    eff = catalog.load_hardware(hw_id).efficiency
    assert eff.mla_decode_fraction == pytest.approx(0.667)
    assert "mla_decode_fraction" not in acc_params.HARDWARE_RANGES
    assert eff.calibration is None or "mla_decode_fraction" not in eff.calibration.parameters


def test_deepseek_decode_attention_is_compute_bound_at_its_mlperf_batch():
    """At the v6.0 Server engine's batch (640 per attention-DP rank, ~2k context) MLA decode on B200
    sits at the FLOP roof (FlashMLA's analysis: compute-bound once q heads × q tokens ≥ ~128): its
    FLOPs at ``mla_decode_fraction`` take at least 95 % of the time its KV read takes at the fitted
    ``kv_memory_fraction`` (the op's ~387 FLOPs per KV byte against B200's ridge of 335-392 FLOPs
    per byte under the fits of 2026-11-27; priced at whichever is longer)."""
    from infersim.engine import stage_graph

    pred = api.predict("b200", "deepseek-r1", "mlperf-deepseek-r1-server", 8, round="v6.0", tp=8, ep=8, dp=8,
                       batch=8 * 640.0, disable=["mtp", "disagg"])
    assert pred.result is not None, pred.reason
    plan = pred.result.plan
    shape = Shape(decode_seqs=8 * 640.0, decode_ctx=2048.0)
    op = next(o for o in stage_graph(plan, Layout(tp=8, ep=8, dp=8), shape).ops if o.name == "attention_decode")
    hw, eff = plan.hardware, plan.hardware.efficiency
    t_flops = op.flops / (hw.compute.flop_rate(op.precision) * eff.mla_decode_fraction * plan.kernel_efficiency)
    t_bytes = op.bytes / (hw.memory.bandwidth * eff.kv_memory_fraction)
    assert op.flops / op.bytes > 300  # ~2·H FLOPs per latent byte: far above a GQA decode's ~2-16
    assert t_flops >= 0.95 * t_bytes, (t_flops, t_bytes)
