"""Mixed-precision checkpoints (``graph.Formats.weight_mix``, preset engine field ``weight_mix``):
each format's share of the linear layers runs its GEMMs in that format, so a step is the
share-weighted sum of the uniform checkpoints' steps, and the weights take the average bytes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from infersim import parallel
from infersim.engine import step_cost
from infersim.errors import SpecError
from infersim.graph import Formats, Layout, Shape, resolve_formats
from infersim.optimizations.presets import EngineFields, load_preset
from infersim.plan import Plan
from infersim.specs.scenario import PrecisionSpec

import strategies as S

B200 = S.pinned(S.hardware("b200"))
H100 = S.pinned(S.hardware("h100-sxm"))
MIXTRAL = S.model("mixtral-8x7b")
MIX = (("fp4", 0.1875), ("fp8", 0.8125))
SHAPES = [Shape(decode_seqs=1, decode_ctx=1024),  # weight streaming
          Shape(decode_seqs=512, decode_ctx=2048, prefill_seqs=2.0, prefill_len=1500, prefill_len_sq=2.5e6)]


def uniform(p: str) -> Formats:
    return Formats(p, p, "fp8")


@pytest.mark.parametrize("shape", SHAPES, ids=["batch1", "mixed512"])
def test_a_mixed_step_is_the_share_weighted_sum_of_the_uniform_ones(shape):
    mixed = Formats("fp8", "fp8", "fp8", weight_mix=MIX)
    plan = Plan(hardware=B200, model=MIXTRAL, formats=mixed)
    got = step_cost(plan, Layout(), shape)
    parts = [step_cost(replace(plan, formats=uniform(p)), Layout(), shape) for p, _ in MIX]
    want = sum(share * float(c.total) for (_, share), c in zip(MIX, parts))
    assert float(got.total) == pytest.approx(want, rel=1e-12)
    for kind in ("gemm", "attention", "comm", "overhead"):
        assert float(got.by_kind[kind]) == pytest.approx(sum(s * float(c.by_kind[kind]) for (_, s), c in zip(MIX, parts)),
                                                         rel=1e-12, abs=1e-18)
    # strictly between the two uniform checkpoints where the GEMMs run at a different rate
    lo, hi = sorted(float(c.total) for c in parts)
    assert lo < float(got.total) < hi


def test_a_mix_of_one_format_is_that_format():
    plan = Plan(hardware=B200, model=MIXTRAL, formats=uniform("fp8"))
    one = replace(plan, formats=Formats("fp8", "fp8", "fp8", weight_mix=(("fp8", 1.0),)))
    for shape in SHAPES:
        assert float(step_cost(one, Layout(), shape).total) == pytest.approx(float(step_cost(plan, Layout(), shape).total),
                                                                             rel=1e-12)


def test_weights_take_the_mix_average_bytes():
    from infersim.units import BYTES_PER_ELEMENT

    mixed = Formats("fp8", "fp8", "fp8", weight_mix=MIX)
    assert mixed.wb == pytest.approx(0.1875 * BYTES_PER_ELEMENT["fp4"] + 0.8125 * BYTES_PER_ELEMENT["fp8"])
    # the linear layers at the average; the 16-bit embedding tables the same in each, and the shares sum to 1
    w = [float(parallel.weight_bytes_per_device(MIXTRAL, Layout(), f)) for f in (uniform("fp4"), uniform("fp8"), mixed)]
    assert w[2] == pytest.approx(0.1875 * w[0] + 0.8125 * w[1], rel=1e-12)
    assert w[0] < w[2] < w[1]


def test_the_recipe_mix_applies_only_where_the_scenario_leaves_formats_to_it_and_the_hardware_runs_them():
    spec = load_preset("v6.0")
    recipe = spec.recipe_for("mixtral-8x7b", "offline", "b200")
    assert dict(recipe.weight_mix) == {"fp4": 0.1875, "fp8": 0.8125}
    auto = PrecisionSpec()
    f = resolve_formats(auto, B200, recipe)
    assert f.weight_mix == recipe.weight_mix and f.weights == "fp8"  # the largest share names it
    assert resolve_formats(auto, H100, recipe).weight_mix is None  # H100 has no fp4 tensor cores: 'auto'
    assert resolve_formats(PrecisionSpec(weights="fp4"), B200, recipe).weight_mix is None  # the user's format wins


@pytest.mark.parametrize("block, message", [
    ({"weight_mix": {"fp4": 0.5, "fp8": 0.4}}, "sum to 0.9"),
    ({"weight_mix": {"fp4": 0.5, "fp8": 0.5}, "weights": "fp4"}, "exclude each other"),
    ({"weight_mix": {"fp4": 0.0, "fp8": 1.0}}, "greater than 0"),
])
def test_a_bad_mix_is_a_spec_error(block, message):
    with pytest.raises((SpecError, ValueError), match=message):
        EngineFields.model_validate(block)
