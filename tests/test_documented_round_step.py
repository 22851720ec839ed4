"""A round's documented MoE kernel step (v6.0's CuTe DSL fused MoE): where a preset documents a
measured maturity of its own kernels (``# calibrated; default X``), that value is the round's
default, the prior of its step over its neighbour, what a fit with no row exercising it holds, and
what a held-out round gets over its neighbours; rounds that document nothing keep 1 (no change)."""

import pytest

from infersim.accuracy import params as acc_params
from infersim.accuracy.cv import held_out_round
from infersim.accuracy.fit import documented_round, moe_without_evidence, round_defaults
from infersim.accuracy.result import CalibrationResult
from infersim.optimizations.presets import load_preset

NAMES = ("kernel_efficiency", "moe_kernel_efficiency", "host_overhead_scale")
CUTE_DSL_OVER_CUTLASS = 1.17  # flashinfer-ai/flashinfer pull 4985: 1.17-1.18x at 8-16 tokens, more below


def _preset(tmp_path, name, line):
    (tmp_path / f"{name}.yaml").write_text(f"name: {name}\n{line}\n", encoding="utf-8")


def test_the_v6_preset_documents_the_cute_dsl_gain_and_the_older_rounds_none():
    assert round_defaults(NAMES, "v6.0") == {"kernel_efficiency": 1.0, "moe_kernel_efficiency": CUTE_DSL_OVER_CUTLASS,
                                             "host_overhead_scale": 1.0}
    for r in ("v4.0", "v4.1", "v5.0", "v5.1"):
        assert round_defaults(NAMES, r) == dict.fromkeys(NAMES, 1.0), r
    # the documented value is a default, not the shipped value: v6.0 ships its fitted factor
    assert load_preset("v6.0").moe_kernel_efficiency != CUTE_DSL_OVER_CUTLASS
    # a round without its own preset file documents nothing (no nearest-earlier fallback)
    assert documented_round(NAMES, "v9.9") is None
    assert round_defaults(NAMES, "v9.9") == dict.fromkeys(NAMES, 1.0)


def test_a_user_preset_folder_documents_its_own_defaults(tmp_path):
    _preset(tmp_path, "v5.1", "moe_kernel_efficiency: 1.0")
    _preset(tmp_path, "v6.0", "moe_kernel_efficiency: 1.6  # calibrated; default 1.3, a measured gain")
    assert round_defaults(NAMES, "v6.0", tmp_path)["moe_kernel_efficiency"] == 1.3
    assert round_defaults(NAMES, "v5.1", tmp_path)["moe_kernel_efficiency"] == 1.0  # uncommented: its own value


def test_the_step_prior_is_the_documented_improvement_over_the_neighbour():
    rounds = ["v5.0", "v5.1", "v6.0"]
    order = {r: i for i, r in enumerate(rounds)}
    current = {r: {"moe_kernel_efficiency": 1.0} for r in rounds}
    documented = {"v5.0": {"moe_kernel_efficiency": 1.0}, "v5.1": {"moe_kernel_efficiency": 1.0},
                  "v6.0": {"moe_kernel_efficiency": 1.17}}
    ps, _ = acc_params.round_parameters(rounds, "v5.1", ["moe_kernel_efficiency"], current, order=order,
                                        prior=documented)
    prior = {p.owner: p.prior for p in ps}
    assert prior == {"v5.0": 1.0, "v6.0": pytest.approx(1.17)}
    ps, _ = acc_params.round_parameters(rounds, "v5.1", ["moe_kernel_efficiency"], current, order=order)
    assert {p.prior for p in ps} == {1.0}  # no documented values: the prior is no change


def test_a_round_without_moe_rows_holds_its_documented_step_else_its_dense_maturity():
    def values():
        return {"v5.0": {"kernel_efficiency": 0.9, "moe_kernel_efficiency": 0.85},
                "v5.1": {"kernel_efficiency": 1.0, "moe_kernel_efficiency": 1.0},
                "v6.0": {"kernel_efficiency": 1.03, "moe_kernel_efficiency": 1.0}}

    flat = dict.fromkeys(("v5.0", "v5.1"), {"moe_kernel_efficiency": 1.0})
    rnd = values()
    assert moe_without_evidence(rnd, {"v6.0"}, "v5.1", {**flat, "v6.0": {"moe_kernel_efficiency": 1.17}}) == {"v6.0"}
    assert rnd["v6.0"]["moe_kernel_efficiency"] == pytest.approx(1.17)  # v5.1's 1.0 times the documented step
    rnd = values()
    moe_without_evidence(rnd, {"v6.0"}, "v5.1", {**flat, "v6.0": {"moe_kernel_efficiency": 1.0}})
    assert rnd["v6.0"]["moe_kernel_efficiency"] == pytest.approx(1.03)  # nothing documented: dense maturity
    rnd = values()
    moe_without_evidence(rnd, {"v6.0"}, "v5.1", {**flat, "v6.0": {"moe_kernel_efficiency": 3.0}})
    assert rnd["v6.0"]["moe_kernel_efficiency"] == pytest.approx(1.5)  # kept in the factor's range


def test_a_held_out_round_gets_its_neighbours_times_its_documented_step(tmp_path):
    for r in ("v5.0", "v5.1"):
        _preset(tmp_path, r, "moe_kernel_efficiency: 1.0")
    _preset(tmp_path, "v6.0", "moe_kernel_efficiency: 1.5  # calibrated; default 1.17, measured")
    values = {"v5.0": {"kernel_efficiency": 0.9, "moe_kernel_efficiency": 0.8},
              "v5.1": {"kernel_efficiency": 1.0, "moe_kernel_efficiency": 1.0}}
    result = CalibrationResult(
        hardware={}, presets={"v5.0": dict(values["v5.0"])}, initial={}, defaults={}, parameters=[], skipped={},
        reference_round="v5.1", rows=0, excluded=[], before={}, after={}, by_owner={}, row_errors=[], data="x",
        date="2026-01-01", seconds=0.0, evaluations=0, predictions=0, message="", round_values=values,
        held_factors={})
    v6 = held_out_round(result, "v6.0", tmp_path)
    assert v6["moe_kernel_efficiency"] == pytest.approx(1.17)  # v5.1's fitted 1.0 times 1.17 / 1.0
    assert v6["kernel_efficiency"] == pytest.approx(1.0)  # nothing documented for the dense kernels
    # a round between them: the neighbours' geometric mean, times its documented 1.0 over theirs
    result.round_values = {**values, "v6.0": {"kernel_efficiency": 1.1, "moe_kernel_efficiency": 1.4}}
    result.presets = {"v5.0": dict(values["v5.0"]), "v6.0": dict(result.round_values["v6.0"])}
    result.reference_round = "v5.0"
    v51 = held_out_round(result, "v5.1", tmp_path)
    assert v51["moe_kernel_efficiency"] == pytest.approx((0.8 * 1.4) ** 0.5 / 1.17 ** 0.5)
    # without a preset file of its own the round documents nothing: its neighbours' values alone
    assert held_out_round(result, "v7.0", tmp_path)["moe_kernel_efficiency"] == pytest.approx(1.4)
