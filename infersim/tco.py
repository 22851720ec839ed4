"""Money: US$ per million tokens from a price per accelerator-hour, and a TCO mode.

"cost" in this module always means money. Broadcasts over arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import SpecError
from .units import HOUR


def usd_per_million_tokens(usd_per_accelerator_hour, accelerators, tokens_per_s):
    """$ per million tokens.

    Notes
    -----
    price · accelerators / (3600 · tokens/s) · 10⁶.
    """
    tokens_per_s = np.asarray(tokens_per_s, dtype=float)
    with np.errstate(divide="ignore"):
        return np.where(tokens_per_s > 0, usd_per_accelerator_hour * accelerators / (HOUR * tokens_per_s) * 1e6, np.inf)


@dataclass(frozen=True)
class Tco:
    """Owning instead of renting: capex over a lifetime plus energy."""

    capex_usd: float
    """Purchase price per accelerator incl. its share of the system, US$."""
    lifetime_years: float = 4.0
    """Depreciation period, years."""
    power_w: float = 1000.0
    """Average power per accelerator incl. its share of host and network, W."""
    pue: float = 1.3
    """Power usage effectiveness of the data centre."""
    usd_per_kwh: float = 0.10
    """Electricity price, US$/kWh."""

    def usd_per_hour(self) -> float:
        """Equivalent cost per accelerator-hour, US$."""
        capex = self.capex_usd / (self.lifetime_years * 365.25 * 24)
        energy = self.power_w / 1000.0 * self.pue * self.usd_per_kwh
        return capex + energy


def tco_usd_per_hour(hw, capex_usd: float, lifetime_years: float = 4.0, pue: float = 1.3, usd_per_kwh: float = 0.10) -> float:
    """Owning cost per accelerator-hour for ``hw``: capex over the lifetime + TDP × PUE × $/kWh.

    Raises SpecError for non-positive inputs or a profile without a TDP.
    """
    for name, v in (("--tco-capex", capex_usd), ("--tco-years", lifetime_years), ("--tco-pue", pue)):
        if not v > 0:
            raise SpecError(f"{name} must be > 0 (got {v})")
    if usd_per_kwh < 0:
        raise SpecError(f"--tco-usd-per-kwh must be >= 0 (got {usd_per_kwh})")
    if hw.tdp_w is None:
        raise SpecError("TCO mode needs the accelerator's power, but the profile has tdp_w: null", path="tdp_w")
    return Tco(capex_usd=capex_usd, lifetime_years=lifetime_years, power_w=hw.tdp_w, pue=pue,
               usd_per_kwh=usd_per_kwh).usd_per_hour()
