"""The premise of benchmarks/capacity_elasticity.py: a hardware profile with every rate divided and
every fixed time multiplied by f prices every engine step exactly f times longer (so a capacity's
response to it is the response to the step time alone)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

import infersim
from infersim.engine import step_cost
from infersim.specs import catalog

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import capacity_elasticity  # noqa: E402


@pytest.mark.parametrize("hw, model, scenario, n, kw", [
    ("h100-sxm", "llama3.1-405b", "mlperf-llama3.1-405b-server", 16, {"round": "v5.1", "tp": 4, "pp": 2}),
    ("gb200-nvl72", "deepseek-r1", "mlperf-deepseek-r1-server", 72, {"round": "v6.0"}),
    ("mi300x", "llama2-70b", "mlperf-llama2-70b-offline", 8, {"round": "v5.1"}),
])
def test_a_slower_profile_prices_every_step_exactly_that_much_longer(tmp_path, hw, model, scenario, n, kw):
    f = 1.05
    tree = yaml.safe_load((ROOT / "hardware_profiles" / f"{hw}.yaml").read_text())
    path = tmp_path / f"{hw}.yaml"
    path.write_text(yaml.safe_dump(capacity_elasticity.slower(tree, f), sort_keys=False))
    slow_hw = catalog.load("hardware", path)
    base_hw = catalog.load("hardware", hw)
    assert slow_hw.memory.hbm_capacity_gib == base_hw.memory.hbm_capacity_gib  # capacities are not rates
    assert slow_hw.efficiency.compute_fraction == base_hw.efficiency.compute_fraction  # nor fractions
    pred = infersim.predict(hw, model, scenario, n, **kw)
    res = pred.result
    slow_plan = dataclasses.replace(res.plan, hardware=slow_hw)
    for i in range(len(res.layouts["tp"])):
        for j in (0, len(res.batch) // 2, len(res.batch) - 1):
            base = step_cost(res.plan, res.layout_at(i), res.shape_at(i, j))
            slow = step_cost(slow_plan, res.layout_at(i), res.shape_at(i, j))
            np.testing.assert_allclose(slow.total, f * base.total, rtol=1e-9)
