"""What a prediction is asked: the resolved specs, the system size, the software and the layout
the user fixed, and the price, as small frozen records checked once at the API edge."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .checks import check_dispatch, check_request
from .errors import SpecError
from .optimizations.presets import LATEST, PresetSpec, load_preset, resolve_round
from .specs import catalog
from .specs.hardware import HardwareSpec
from .specs.model import ModelSpec
from .specs.scenario import MAX_TOKENS, MIN_TOKENS, SLO_FIELDS, LengthSpec

MAX_ACCELERATORS = 1_000_000


@dataclass(frozen=True)
class Inputs:
    """Resolved specs and their IDs."""

    hardware: HardwareSpec
    model: ModelSpec
    scenario: Any
    hardware_id: str
    model_id: str
    scenario_id: str


SLO_FLAGS = {"ttft_ms": ("--ttft-ms", 1e7), "tpot_ms": ("--tpot-ms", 1e6), "e2e_ms": ("--e2e-ms", 1e8),
             "percentile": ("--slo-percentile", 100.0)}
"""Latency-limit overrides (``SloSpec`` field → CLI flag and upper bound: ms, the percentile below
100; the spec's own bounds)."""
assert tuple(SLO_FLAGS) == SLO_FIELDS


def apply_slo(scenario, scenario_id: str, slo: Mapping[str, float | None] | None):
    """``scenario`` with the latency limits in ``slo`` (``SLO_FLAGS`` keys; None leaves a field as
    the scenario has it) replacing its own. Offline scenarios have no limits to replace."""
    given = {k: v for k, v in (slo or {}).items() if v is not None}
    if not given:
        return scenario
    unknown = sorted(set(given) - set(SLO_FLAGS))
    if unknown:
        raise SpecError(f"unknown latency limit '{unknown[0]}' (known: {', '.join(SLO_FLAGS)})")
    for key, value in given.items():
        flag, top = SLO_FLAGS[key]
        unit = "" if key == "percentile" else " ms"
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and 0 < value
        if not ok or (value >= top if key == "percentile" else value > top):
            bound = f"(0, {top:g})" if key == "percentile" else f"(0, {top:,.0f}]"
            raise SpecError(f"{flag} must be in {bound}{unit} (got {value})")
    current = getattr(scenario, "slo", None)
    if current is None:
        flag = SLO_FLAGS[next(iter(given))][0]
        raise SpecError(f"{flag}: scenario '{scenario_id}' is {getattr(scenario, 'kind', 'offline')} and has no latency "
                        "limits to change (they apply to server and interactive scenarios)")
    return scenario.model_copy(update={"slo": current.model_copy(update=given)})


def limits_dict(scenario) -> dict[str, float | None] | None:
    """The latency limits in force for ``scenario`` (its ``slo``), as the JSON outputs report them;
    None for an Offline scenario."""
    slo = getattr(scenario, "slo", None)
    return None if slo is None else {k: getattr(slo, k) for k in SLO_FIELDS}


def load_inputs(hardware, model, scenario, *, isl: float | None = None, osl: float | None = None,
                trace=None, slo: Mapping[str, float | None] | None = None) -> Inputs:
    """Resolve IDs/paths (or accept spec objects) and apply ISL/OSL or trace overrides and latency
    limits (``apply_slo``)."""
    def get(kind, x):
        if isinstance(x, (str, bytes)) or hasattr(x, "__fspath__"):
            return catalog.load(kind, x), catalog.profile_id(kind, x)
        return x, getattr(x, "name", kind)

    hw, hw_id = get("hardware", hardware)
    sc, sc_id = get("scenario", scenario)
    if model is None:
        if not getattr(sc, "model", None):
            raise SpecError("no --model given and the scenario names no default model")
        model = sc.model
    md, md_id = get("model", model)
    if getattr(md, "kind", None) is not None or getattr(sc.workload, "kind", None) is not None:
        raise SpecError(f"'{md_id}' / '{sc_id}' is a non-LLM (text-to-video or recommendation) workload: "
                        "only `infersim run` and `infersim validate` support it")
    if trace is not None:
        from .specs.scenario import apply_trace

        sc = sc.model_copy(update={"workload": apply_trace(sc.workload, Path(trace))})
    if isl is not None or osl is not None:
        wl = sc.workload
        for flag, value in (("isl", isl), ("osl", osl)):
            if value is None:
                continue
            if not MIN_TOKENS <= value <= MAX_TOKENS:
                raise SpecError(f"--{flag} must be in [1, 1e7] tokens (got {value})")
            wl = wl.model_copy(update={flag: LengthSpec(mean=value)})
        sc = sc.model_copy(update={"workload": wl})
    sc = apply_slo(sc, sc_id, slo)
    return Inputs(hw, md, sc, hw_id, md_id, sc_id)


def default_accelerators(hw: HardwareSpec) -> int:
    """One scale-up domain, capped at 72 (8 for pods larger than a rack)."""
    d = hw.scale_up.domain_size
    return d if d <= 72 else 8


Axis = int | tuple[int, ...] | None


def axis_values(value) -> tuple | None:
    """A fixed axis as a tuple of values (a scalar is a one-value axis; None: searched)."""
    if value is None:
        return None
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


@dataclass(frozen=True)
class LayoutRequest:
    """Layout axes the user fixed: one value, several values (a sweep), or None (searched)."""

    tp: Axis = None
    pp: Axis = None
    ep: Axis = None
    dp: Axis = None
    batch: float | tuple[float, ...] | None = None
    """Decode sequences per instance."""

    def check(self, accelerators: int) -> None:
        for name in ("tp", "ep", "dp", "pp"):
            for v in axis_values(getattr(self, name)) or ():
                if not 1 <= v <= accelerators:
                    raise SpecError(f"--{name} must be in [1, accelerators={accelerators}] (got {v})")
        values = axis_values(self.batch) or ()
        if len(values) > 1 and set(map(type, values)) <= {int, float}:
            a = np.asarray(values, dtype=float)
            if bool(np.all((a >= 1) & (a <= 1e6))):
                return  # a long batch axis checked at once; the loop below names a bad value
        for b in values:
            if not 1 <= b <= 1e6:
                raise SpecError(f"--batch must be in [1, 1e6] sequences (got {b})")


@dataclass(frozen=True)
class Software:
    """The software side: a round's preset plus the user's optimization toggles."""

    preset: PresetSpec
    round: str
    """The preset round actually used (``resolve_round`` of what was asked)."""
    enable: tuple[str, ...] = ()
    disable: tuple[str, ...] = ()
    params: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Optimization parameters the user set ({kind: {param: value}})."""
    dispatch: str | None = None
    """How the front end hands arriving requests to the instances (``plan.Engine.instance_dispatch``:
    random, round_robin or load_balancing); None: the round preset's engine setting."""

    @classmethod
    def for_round(cls, round: str | None = None, *, presets_dir=None, preset: PresetSpec | None = None,
                  enable=(), disable=(), params=None, dispatch: str | None = None) -> "Software":
        """The preset of ``round`` (default: the latest) with the user's toggles."""
        check_dispatch(dispatch)
        if preset is None:
            preset = load_preset(round or LATEST) if presets_dir is None else load_preset(round, presets_dir)
        return cls(preset, resolve_round(round), tuple(enable or ()), tuple(disable or ()), dict(params or {}),
                   dispatch)


@dataclass(frozen=True)
class Query:
    """One prediction request: specs, system size, software, fixed layout and price."""

    inputs: Inputs
    accelerators: int
    software: Software
    layout: LayoutRequest = LayoutRequest()
    price_per_hour: float | None = None
    """US$ per accelerator-hour (None: the hardware profile's price)."""

    def __post_init__(self):
        if not 1 <= self.accelerators <= MAX_ACCELERATORS:
            raise SpecError(f"--accelerators must be in [1, 1e6] (got {self.accelerators})")
        self.layout.check(self.accelerators)

    @property
    def price(self) -> float:
        return self.inputs.hardware.price.usd_per_hour if self.price_per_hour is None else self.price_per_hour

    @classmethod
    def build(cls, hardware=None, model=None, scenario=None, accelerators: int | None = None, *,
              round: str | None = None, isl: float | None = None, osl: float | None = None, trace=None,
              tp: int | None = None, ep: int | None = None, dp: int | None = None, pp: int | None = None,
              batch: float | None = None, enable=(), disable=(), params: dict | None = None,
              price_per_hour: float | None = None, presets_dir=None, inputs: Inputs | None = None,
              preset: PresetSpec | None = None, dispatch: str | None = None,
              slo: Mapping[str, float | None] | None = None) -> "Query":
        """A query from CLI-style arguments (IDs or paths or spec objects; None = default/searched;
        ``slo``: latency limits replacing the scenario's, ``apply_slo``)."""
        inputs = inputs or load_inputs(hardware, model, scenario, isl=isl, osl=osl, trace=trace, slo=slo)
        check_request(inputs, accelerators, tp=tp, ep=ep, dp=dp, pp=pp, batch=batch, price_per_hour=price_per_hour)
        n = int(accelerators) if accelerators is not None else default_accelerators(inputs.hardware)
        software = Software.for_round(round, presets_dir=presets_dir, preset=preset, enable=enable, disable=disable,
                                      params=params, dispatch=dispatch)
        return cls(inputs, n, software, LayoutRequest(tp=tp, pp=pp, ep=ep, dp=dp, batch=batch), price_per_hour)
