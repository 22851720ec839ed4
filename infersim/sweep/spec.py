"""A sweep: named axes (the spec's own field names) whose product is the grid.

Categorical axes (hardware, model, scenario, accelerators, round, isl, osl, optimization
toggles, price) form *cells*, evaluated one at a time; inside a cell the numeric axes (tp, pp,
ep, dp, batch) are numpy arrays, so a cell is a handful of array expressions however many
points it holds.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from .. import optimizations as opt
from ..checks import check_param
from ..optimizations.presets import Dispatch
from ..errors import SpecError
from ..query import SLO_FLAGS
from ..specs._base import Spec, load_spec

Keep = Literal["best", "pareto", "all"]


class BatchRange(Spec):
    """A batch axis written as a range: ``start`` to ``stop`` (inclusive) in ``num`` steps."""

    start: float = Field(ge=1, le=1e6)
    """Smallest decode batch per instance, sequences."""
    stop: float = Field(ge=1, le=1e6)
    """Largest decode batch per instance, sequences."""
    num: int = Field(ge=1, le=1_000_000)
    """Number of values on the axis."""
    spacing: Literal["linear", "geometric"] = "geometric"
    """Spacing of the values (rounded to whole sequences; duplicates dropped)."""

    @model_validator(mode="after")
    def _order(self):
        if self.stop < self.start:
            raise ValueError("stop: must be >= start")
        return self

    def values(self) -> tuple[float, ...]:
        import numpy as np

        space = np.geomspace if self.spacing == "geometric" else np.linspace
        return tuple(float(v) for v in np.unique(np.round(space(self.start, self.stop, self.num))))


class SweepSpec(Spec):
    """The axes of a sweep. Lists are axes; a missing layout axis is searched over every layout
    the hardware allows; a missing batch axis uses the search's geometric 1-16384 axis."""

    hardware: list[str] = Field(min_length=1)
    """Hardware profile IDs or files."""
    model: list[str | None] = Field(default_factory=lambda: [None])
    """Model profile IDs or files (default: each scenario's model)."""
    scenario: list[str] = Field(min_length=1)
    """Scenario IDs or files."""
    accelerators: list[int | None] = Field(default_factory=lambda: [None])
    """Accelerators in the system (default: one scale-up domain)."""
    round: list[str | None] = Field(default_factory=lambda: [None])
    """MLPerf round presets (default: the latest)."""
    isl: list[float | None] = Field(default_factory=lambda: [None])
    """Mean input lengths, tokens (default: the scenario's distribution)."""
    osl: list[float | None] = Field(default_factory=lambda: [None])
    """Mean output lengths, tokens (default: the scenario's distribution)."""
    optimizations: list[list[str]] = Field(default_factory=lambda: [[]])
    """Optimization sets to force on, one cell each (each list is --enable'd; the round's choices
    are still searched)."""
    disable: list[str] = Field(default_factory=list)
    """Optimizations turned off in every cell."""
    price_per_hour: list[float | None] = Field(default_factory=lambda: [None])
    """US$ per accelerator-hour (default: the hardware profile's price)."""
    dispatch: list[Dispatch | None] = Field(default_factory=lambda: [None])
    """How the front end hands requests to the instances (``presets.Dispatch``; default:
    the round preset's)."""
    ttft_ms: list[float | None] = Field(default_factory=lambda: [None])
    """TTFT limits, ms, replacing the scenario's (Server/Interactive; default: the scenario's)."""
    tpot_ms: list[float | None] = Field(default_factory=lambda: [None])
    """TPOT limits, ms, replacing the scenario's (Server/Interactive; default: the scenario's)."""
    tp: list[int] | None = None
    """Tensor-parallel sizes to try (default: searched)."""
    pp: list[int] | None = None
    """Pipeline stages to try (default: searched)."""
    ep: list[int] | None = None
    """Expert-parallel sizes to try (default: searched)."""
    dp: list[int] | None = None
    """Attention data-parallel sizes to try (default: searched)."""
    batch: list[float] | BatchRange | None = None
    """Decode batch per instance: a list or a range (default: geometric 1-16384)."""
    keep: Keep = "all"
    """Rows written per cell: every point, the best meeting the limits, or the Pareto frontier."""
    params: dict[str, list[Any]] = Field(default_factory=dict)
    """Optimization parameters as axes, ``{"KIND.PARAM": [values]}`` (e.g. ``mtp.depth: [1, 2, 3]``,
    ``disagg.decode_workers: [36, 40, 44]``): one cell per combination, each value checked against
    the optimization's own parameter type and range."""

    @model_validator(mode="after")
    def _check(self):
        for name in ("tp", "pp", "ep", "dp"):
            values = getattr(self, name)
            if values is not None and (not values or any(v < 1 for v in values)):
                raise ValueError(f"{name}: must be a non-empty list of integers >= 1")
        if isinstance(self.batch, list) and (not self.batch or any(not 1 <= b <= 1e6 for b in self.batch)):
            raise ValueError("batch: must be a non-empty list of values in [1, 1e6] sequences")
        for name in ("accelerators",):
            if any(v is not None and not 1 <= v <= 1_000_000 for v in getattr(self, name)):
                raise ValueError(f"{name}: values must be in [1, 1e6]")
        for name in ("isl", "osl"):
            if any(v is not None and not 0 < v <= 1e7 for v in getattr(self, name)):
                raise ValueError(f"{name}: values must be in (0, 1e7] tokens")
        if any(v is not None and v < 0 for v in self.price_per_hour):
            raise ValueError("price_per_hour: values must be >= 0 US$")
        for name in ("ttft_ms", "tpot_ms"):
            top = SLO_FLAGS[name][1]
            if any(v is not None and not 0 < v <= top for v in getattr(self, name)):
                raise ValueError(f"{name}: values must be in (0, {top:,.0f}] ms")
        return self

    @field_validator("params")
    @classmethod
    def _check_params(cls, params: dict[str, list[Any]]) -> dict[str, list[Any]]:
        out = {}
        for key, values in params.items():
            kind, dot, param = key.partition(".")
            if not dot or not kind or not param:
                raise ValueError(f"keys are KIND.PARAM, e.g. mtp.depth (got '{key[:80]}')")
            if kind not in opt.REGISTRY:
                raise ValueError(f"{key}: unknown optimization '{kind}' (known: {', '.join(sorted(opt.REGISTRY))})")
            if not values:
                raise ValueError(f"{key}: give at least one value")
            try:
                out[key] = [check_param(kind, param, v, key) for v in values]
            except SpecError as exc:
                raise ValueError(str(exc)) from None
        return out

    def batch_values(self) -> tuple[float, ...] | None:
        if self.batch is None:
            return None
        return self.batch.values() if isinstance(self.batch, BatchRange) else tuple(float(b) for b in self.batch)

    def cells(self) -> list["Cell"]:
        """Every combination of the categorical axes, in a fixed order."""
        layout = {k: (tuple(getattr(self, k)) if getattr(self, k) is not None else None) for k in ("tp", "pp", "ep", "dp")}
        batch = self.batch_values()
        keys = list(self.params)
        settings = [tuple(zip(keys, combo)) for combo in itertools.product(*(self.params[k] for k in keys))]
        out = []
        for hw, md, sc, n, rnd, isl, osl, on, price, params, how, ttft, tpot in itertools.product(
                self.hardware, self.model, self.scenario, self.accelerators, self.round, self.isl, self.osl,
                self.optimizations, self.price_per_hour, settings, self.dispatch, self.ttft_ms, self.tpot_ms):
            out.append(Cell(hw, md, sc, n, rnd, isl, osl, tuple(on), tuple(self.disable), price, layout["tp"],
                            layout["pp"], layout["ep"], layout["dp"], batch, self.keep, params, how, ttft, tpot))
        return out


@dataclass(frozen=True)
class Cell:
    """One combination of categorical axes; its numeric axes are evaluated as arrays."""

    hardware: str
    model: str | None
    scenario: str
    accelerators: int | None
    round: str | None
    isl: float | None
    osl: float | None
    enable: tuple[str, ...]
    disable: tuple[str, ...]
    price_per_hour: float | None
    tp: tuple[int, ...] | None
    pp: tuple[int, ...] | None
    ep: tuple[int, ...] | None
    dp: tuple[int, ...] | None
    batch: tuple[float, ...] | None
    keep: Keep
    params: tuple[tuple[str, Any], ...] = ()
    """(``KIND.PARAM``, value) pairs of the cell's optimization parameters."""
    dispatch: str | None = None
    """The front end's request dispatch to the instances (None: the round preset's)."""
    ttft_ms: float | None = None
    """TTFT limit replacing the scenario's, ms (None: the scenario's)."""
    tpot_ms: float | None = None
    """TPOT limit replacing the scenario's, ms (None: the scenario's)."""

    def slo(self) -> dict[str, float | None]:
        """The cell's latency-limit overrides (``query.apply_slo``: None keeps the scenario's)."""
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms}

    def param_overrides(self) -> dict[str, dict[str, Any]]:
        """``params`` as ``Query.build``'s {kind: {param: value}}."""
        out: dict[str, dict[str, Any]] = {}
        for key, value in self.params:
            kind, _, param = key.partition(".")
            out.setdefault(kind, {})[param] = value
        return out

    def params_label(self) -> str:
        """The ``params`` column: 'kind.param=value' joined by ';' ('' without parameters)."""
        return ";".join(f"{k}={v}" for k, v in self.params)


def load_sweep(path) -> SweepSpec:
    return load_spec(SweepSpec, path)
