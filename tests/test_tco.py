"""Money: $/M tokens and the TCO mode."""

import pytest

from infersim import tco
from infersim.errors import SpecError
from infersim.specs import load_hardware


def test_usd_per_million_tokens_by_hand():
    # $3/h · 8 accelerators / (3600 s · 10,000 tokens/s) · 1e6 = $0.6667 per M tokens
    assert float(tco.usd_per_million_tokens(3.0, 8, 10_000)) == pytest.approx(0.666667, rel=1e-5)
    # cost scales inversely with throughput
    assert float(tco.usd_per_million_tokens(3.0, 8, 20_000)) == pytest.approx(0.333333, rel=1e-5)


def test_tco_hour_by_hand():
    # $30,000 over 4 years = 30000 / 35064 h = $0.8556/h; 700 W · 1.3 · $0.10/kWh = $0.091/h
    hw = load_hardware("h100-sxm")
    assert tco.tco_usd_per_hour(hw, 30_000, 4, 1.3, 0.10) == pytest.approx(30000 / 35064 + 0.091, rel=1e-6)


def test_tco_needs_power_and_positive_inputs():
    with pytest.raises(SpecError, match="tdp_w"):
        tco.tco_usd_per_hour(load_hardware("tpu-v7"), 20_000)
    with pytest.raises(SpecError, match="--tco-years"):
        tco.tco_usd_per_hour(load_hardware("h100-sxm"), 20_000, lifetime_years=0)
