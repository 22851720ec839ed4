"""The free parameters calibrate fits: named, each with a documented physical range.

Per hardware profile: a few ``efficiency`` fields (fractions of peak, a small-GEMM knee, a host
cost per step). Per round preset: three software-maturity factors, constrained so that a newer
round is never slower than an older one. Each round factor is parametrised as its neighbour's
value (towards the reference round, whose values stay fixed) times an improvement factor
``g >= 1``: kernel factors grow by ``g`` from one round to the next, host overhead shrinks by
``g``. The optimizer works on every parameter scaled to [0, 1] over its range (improvement
factors on a log scale), so a parameter at 0 or 1 sits on a bound.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..errors import SpecError


@dataclass(frozen=True)
class Range:
    """A documented physical range of one parameter."""

    lower: float
    upper: float
    unit: str
    why: str
    """What bounds it, with the source."""


HARDWARE_RANGES: dict[str, Range] = {
    "compute_fraction": Range(
        0.30, 0.95, "fraction of dense peak FLOP/s",
        "large-GEMM MAMF is 0.6-0.93 of peak on current GPUs (stas00/ml-engineering compute/accelerator/"
        "README.md); end to end over a model's mix of GEMM shapes it is lower, but not below ~0.3"),
    "memory_fraction": Range(
        0.50, 0.95, "fraction of peak HBM bandwidth",
        "streaming reads reach 0.8-0.93 of peak (aiconfigurator mem_bw_empirical_scaling_factor 0.8)"),
    "kv_memory_fraction": Range(
        0.25, 0.90, "fraction of peak HBM bandwidth",
        "paged KV-cache reads: 42 % paged, 57 % contiguous on H100 (mikamirai.com 2026-03); never above "
        "streaming reads"),
    "attention_fraction": Range(
        0.15, 0.90, "fraction of dense peak FLOP/s",
        "FlashAttention-2 reaches 35 % and FlashAttention-3 75 % of H100 peak "
        "(shared/reference/effects.md section 6)"),
    "gemm_m_half": Range(
        0.0, 1024.0, "GEMM rows (tokens)",
        "rows at which small-M GEMM efficiency halves; 0 = no penalty, one 128-256-row tile is the "
        "physical scale; the upper end (several tiles) is wider than physical: above the fp8 ridge point "
        "(~150-250 rows) it makes a batch-1 GEMM compute-bound, which weight-streaming kernels are not"),
    "gemm_overlap": Range(
        0.0, 1.0, "share of the shorter GEMM phase hidden",
        "1 = ideal roofline (loads fully hidden behind MMAs or vice versa); 0 = no overlap (a kernel that "
        "loads, then computes). Multistage TMA/cp.async pipelines overlap them in steady state; a decode "
        "GEMM of one or two waves spends a large share of its time filling and draining the pipeline"),
    "moe_memory_fraction": Range(
        0.15, 0.95, "fraction of peak HBM bandwidth",
        "routed-expert grouped GEMMs at decode stream their experts below dense speed: MoE decode at 34 % "
        "of the achievable roofline against 94 % dense on one engine (jundot/omlx issue 2238, about 0.29 of "
        "peak); never above streaming reads (0.95)"),
    "fp4_memory_fraction": Range(
        0.15, 0.95, "fraction of peak HBM bandwidth",
        "block-scaled FP4 GEMM weight streams on B200: 0.22 of peak at M = 1 (CUTLASS backend, "
        "flashinfer-ai/flashinfer issue 2025-09 #1732), 0.375-0.5 at M = 16 (NVIDIA/cutlass issue #2266), "
        "where 16-bit and MXFP8 GEMMs reach 0.65-0.75; never above streaming reads (0.95)"),
    "step_overhead_ms": Range(
        0.0, 5.0, "ms per engine step",
        "scheduler, sampling and host synchronisation per step; CUDA graphs cut batch-1 steps 7x "
        "(effects.md section 6), leaving about a millisecond; 5 ms is a generous ceiling (PHYSICAL_STEP_OVERHEAD "
        "is the physical one)"),
}
"""Physical range of each hardware efficiency parameter calibrate may fit."""

KERNEL_PARAMETERS = ("compute_fraction", "memory_fraction", "kv_memory_fraction", "attention_fraction",
                     "gemm_m_half", "gemm_overlap", "moe_memory_fraction", "fp4_memory_fraction")
"""The efficiency parameters of the GPU's kernels (fractions of its own peaks, the small-GEMM knee):
one value for profiles that carry the same die (``EfficiencySpec.kernels_as``). The per-step host
cost is the system's (its CPU), not the die's."""

HOST_PARAMETERS = ("step_overhead_ms",)
"""The efficiency parameters of the host (the CPU running the engine's scheduler and sampling): one
value for profiles that carry the same host (``EfficiencySpec.host_as``)."""

PHYSICAL_STEP_OVERHEAD = Range(
    0.0, 1.5, "ms per engine step",
    "scheduler, sampling and host synchronisation per step beside the per-response streaming term (presets' "
    "engine blocks); CUDA graphs cut batch-1 steps 7x (effects.md section 6), leaving about a millisecond")
"""The host-overhead range of the physical refit (``benchmarks/physical_refit.py``); the shipped
fit's values (2-4 ms) lie above it."""


@dataclass(frozen=True)
class RoundFactor:
    """A per-round maturity factor and the largest improvement from one round to the next."""

    direction: int
    """+1: a newer round's value is larger (kernel speed); -1: smaller (host overhead)."""
    max_step: float
    """Largest improvement factor between adjacent rounds (the smallest is 1: never slower)."""
    range: Range
    """Range of the factor itself."""


ROUND_FACTORS: dict[str, RoundFactor] = {
    "kernel_efficiency": RoundFactor(+1, 1.5, Range(
        0.5, 1.5, "multiplier on compute and attention efficiency",
        "a round's kernels are never slower than the previous round's and at most 1.5x faster: FA3 vs FA2 "
        "1.5-2x on attention alone, CUDA graphs +22 %, CUTLASS updates +1.3 % (effects.md section 6)")),
    "moe_kernel_efficiency": RoundFactor(+1, 2.0, Range(
        0.3, 1.5, "the routed-expert GEMMs' whole maturity (MMA rate and weight stream; kernel_efficiency "
        "does not apply to them)",
        "MoE kernels never slower than the previous round's; NVFP4 MoE GEMMs up to 1.9x and grouped-GEMM "
        "tuning +12 % (effects.md sections 6-7)")),
    "host_overhead_scale": RoundFactor(-1, 2.0, Range(
        0.0, 5.0, "multiplier on the per-step host overhead",
        "host overhead never grows in a newer round and at most halves per round (SGLang event loop and "
        "graphs: 1.79x end to end, effects.md section 6)")),
}
"""Per-round preset parameters, their direction and ranges."""

BOUND_TOLERANCE = 0.01
"""A parameter within this fraction of its (scaled) range of a bound is reported as on the bound."""


@dataclass(frozen=True)
class Parameter:
    """One optimizer variable: a hardware efficiency, or a round's improvement over a neighbour."""

    kind: Literal["hardware", "step"]
    owner: str
    """Hardware ID, or the round whose value the step sets."""
    name: str
    lower: float
    upper: float
    initial: float
    """Start value (the efficiency itself, or the improvement factor)."""
    prior: float
    """Value the weak prior pulls towards (the documented default)."""
    neighbour: str | None = None
    """For a step: the adjacent round towards the reference that it is relative to."""

    @property
    def label(self) -> str:
        return f"{self.owner}.{self.name}"

    def scale(self, v: float) -> float:
        """Value → [0, 1] over the range (improvement factors on a log scale)."""
        if self.kind == "step":
            return math.log(max(v, 1.0)) / math.log(self.upper)
        return (v - self.lower) / (self.upper - self.lower)

    def unscale(self, x: float) -> float:
        x = min(max(float(x), 0.0), 1.0)
        if self.kind == "step":
            return float(self.upper ** x)
        return self.lower + x * (self.upper - self.lower)


def hardware_parameters(owner: str, names: Sequence[str], current: Mapping[str, float],
                        default: Mapping[str, float], *, start: Literal["current", "default"] = "current"
                        ) -> tuple[list[Parameter], list[str]]:
    """Parameters of one hardware; notes for start values outside the documented range."""
    out, notes = [], []
    for name in names:
        rng = HARDWARE_RANGES[name]
        v = float((current if start == "current" else default)[name])
        if not rng.lower <= v <= rng.upper:
            notes.append(f"{owner}.{name} = {v:.4g} starts outside its range {rng.lower:g}-{rng.upper:g}; "
                         "clipped into it")
        clip = lambda x: float(min(max(x, rng.lower), rng.upper))  # noqa: E731
        out.append(Parameter("hardware", owner, name, rng.lower, rng.upper, clip(v), clip(float(default[name]))))
    return out, notes


def round_chain(rounds: Sequence[str], reference: str) -> dict[str, str]:
    """Each fitted round → its neighbour towards ``reference`` (``rounds`` oldest first)."""
    i_ref = list(rounds).index(reference)
    return {r: rounds[i + 1] if i < i_ref else rounds[i - 1] for i, r in enumerate(rounds) if i != i_ref}


def improvement(name: str, value: float, neighbour_value: float, newer: bool) -> float:
    """Improvement factor of a round over its neighbour (``newer``: the round is the newer one)."""
    d = ROUND_FACTORS[name].direction
    hi, lo = (value, neighbour_value) if newer else (neighbour_value, value)
    if lo <= 0 or hi <= 0:
        return 1.0
    return (hi / lo) ** d


def round_parameters(rounds: Sequence[str], reference: str, names: Sequence[str],
                     current: Mapping[str, Mapping[str, float]], *, order: Mapping[str, int],
                     start: Literal["current", "default"] = "current",
                     prior: Mapping[str, Mapping[str, float]] | None = None) -> tuple[list[Parameter], list[str]]:
    """Improvement-factor parameters of every fitted round but the reference, and notes.

    ``prior``: each round's documented factors; a step's prior is the documented improvement over
    its neighbour (1, no change, where the two document the same value or ``prior`` is None)."""
    chain = round_chain(rounds, reference)
    out, notes = [], []
    for r, nb in chain.items():
        newer = order[r] > order[nb]
        for name in names:
            f = ROUND_FACTORS[name]
            g = 1.0
            if start == "current":
                g = improvement(name, current[r][name], current[nb][name], newer)
                if not 1.0 <= g <= f.max_step * (1 + 1e-9):
                    what = ("slower than" if newer else "faster than") if g < 1 else \
                        f"more than {f.max_step:g}x apart from"
                    notes.append(f"{r}.{name} starts {what} {nb} ({current[r][name]:.4g} vs "
                                 f"{current[nb][name]:.4g}); started at the nearest allowed value")
            p = 1.0 if prior is None else improvement(name, prior[r][name], prior[nb][name], newer)
            out.append(Parameter("step", r, name, 1.0, f.max_step, float(min(max(g, 1.0), f.max_step)),
                                 float(min(max(p, 1.0), f.max_step)), nb))
    return out, notes


def round_values(params: Sequence[Parameter], theta: Sequence[float], anchor: Mapping[str, float],
                 reference: str) -> dict[str, dict[str, float]]:
    """Absolute round factors from improvement factors, walking out from the reference's ``anchor``;
    a factor the steps would carry past its documented range stays on the range's bound (order
    is kept: the bound is never on the wrong side of the neighbour's in-range value)."""
    steps = {(p.owner, p.name): (p.neighbour, t) for p, t in zip(params, theta) if p.kind == "step"}
    out: dict[str, dict[str, float]] = {reference: dict(anchor)}

    def value(r: str, name: str) -> float:
        if r in out and name in out[r]:
            return out[r][name]
        nb, g = steps[(r, name)]
        base = value(nb, name)
        newer = _newer(r, nb)
        f = ROUND_FACTORS[name]
        v = base * (g ** f.direction if newer else g ** (-f.direction))
        v = min(max(v, f.range.lower), f.range.upper)  # the steps may not carry it out of its range
        out.setdefault(r, {})[name] = v
        return v

    for (r, name) in steps:
        value(r, name)
    return out


def _newer(a: str, b: str) -> bool:
    from .data import version_key

    return version_key(a) > version_key(b)


def step_support(params: Sequence[Parameter], reference: str) -> dict[int, set[str]]:
    """Parameter index → rounds whose values a step changes (itself and rounds beyond it)."""
    from .data import version_key

    ref = version_key(reference)
    out = {}
    for j, p in enumerate(params):
        if p.kind != "step":
            continue
        k = version_key(p.owner)
        out[j] = {r for r in {q.owner for q in params if q.kind == "step"}
                  if (version_key(r) >= k if k > ref else version_key(r) <= k)}
    return out


@dataclass(frozen=True)
class Finding:
    """A fitted parameter on (or within ``BOUND_TOLERANCE`` of) a bound of its range."""

    parameter: str
    value: float
    bound: float
    side: Literal["lower", "upper"]
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"parameter": self.parameter, "value": self.value, "bound": self.bound, "side": self.side,
                "text": self.text}


def value_bound_findings(owner: str, values: Mapping[str, float], why: str) -> list[str]:
    """Texts for hardware values of ``owner`` that sit within ``BOUND_TOLERANCE`` of a bound of
    their range (on the range's own linear scale), e.g. a fleet-prior value that was not fitted."""
    out = []
    for name, v in values.items():
        rng = HARDWARE_RANGES.get(name)
        if rng is None:
            continue
        x = (float(v) - rng.lower) / (rng.upper - rng.lower)
        side = "lower" if x <= BOUND_TOLERANCE else "upper" if x >= 1 - BOUND_TOLERANCE else None
        if side is not None:
            out.append(_on_bound(f"{owner}.{name}", float(v), side, rng, why))
    return out


def _on_bound(label: str, v: float, side: str, rng: Range, why: str) -> str:
    return f"{label} = {v:.4g} is on the {side} bound of its range {rng.lower:g}-{rng.upper:g} {rng.unit}: {why}"


def bound_findings(params: Sequence[Parameter], x: np.ndarray, rounds: Mapping[str, Mapping[str, float]]
                   ) -> list[Finding]:
    """Findings for every parameter on a bound, and for round factors on their range's bound (where
    ``round_values`` holds a factor the round steps would carry beyond it)."""
    out = []
    for p, xi in zip(params, x):
        side = "lower" if xi <= BOUND_TOLERANCE else "upper" if xi >= 1 - BOUND_TOLERANCE else None
        if side is None:
            continue
        v = p.unscale(xi)
        bound = p.lower if side == "lower" else p.upper
        if p.kind == "step":  # reported as the round's own factor against its neighbour's
            d = ROUND_FACTORS[p.name].direction * (1 if _newer(p.owner, p.neighbour) else -1)
            v, bound = rounds[p.owner][p.name], rounds[p.neighbour][p.name] * bound ** d
        if p.kind == "hardware":
            rng = HARDWARE_RANGES[p.name]
            text = _on_bound(p.label, v, side, rng, "the data push it past what is physical; the model misses a "
                             "mechanism here")
        elif side == "lower":
            text = (f"{p.label} = {rounds[p.owner][p.name]:.4g} equals {p.neighbour}'s: the data would make "
                    f"the {'newer' if _newer(p.owner, p.neighbour) else 'older'} round "
                    f"{'slower' if _newer(p.owner, p.neighbour) else 'faster'}, which the constraint forbids")
        else:
            text = (f"{p.label} = {rounds[p.owner][p.name]:.4g} is {p.upper:g}x apart from {p.neighbour}'s "
                    f"{rounds[p.neighbour][p.name]:.4g}, the largest change allowed between adjacent rounds")
        out.append(Finding(p.label, float(v), float(bound), side, text))
    stepped = {(p.owner, p.name) for p in params if p.kind == "step"}
    for r, vals in rounds.items():
        for name, v in vals.items():
            if (r, name) not in stepped:
                continue
            rng = ROUND_FACTORS[name].range
            tol = BOUND_TOLERANCE * (rng.upper - rng.lower)
            if v <= rng.lower + tol or v >= rng.upper - tol:
                side = "lower" if v <= rng.lower + tol else "upper"
                out.append(Finding(f"{r}.{name}", float(v), rng.lower if side == "lower" else rng.upper, side,
                                   _on_bound(f"{r}.{name}", v, side, rng, "the round steps would carry it beyond")))
    return out


def monotone_violations(values: Mapping[str, Mapping[str, float]]) -> list[str]:
    """Adjacent rounds (oldest first) where a newer round is slower; empty when monotone."""
    from .data import version_key

    rounds = sorted(values, key=version_key)
    out = []
    for a, b in zip(rounds, rounds[1:]):
        for name, f in ROUND_FACTORS.items():
            if name in values[a] and name in values[b]:
                if (values[b][name] - values[a][name]) * f.direction < -1e-12:
                    out.append(f"{b}.{name} = {values[b][name]:.4g} is slower than {a}'s {values[a][name]:.4g}")
    return out


def check_names(parameters: Sequence[str], round_parameters: Sequence[str]) -> None:
    """SpecError for a name that is not a calibratable parameter."""
    for name in parameters:
        if name not in HARDWARE_RANGES:
            raise SpecError(f"'{name}' is not a calibratable efficiency parameter "
                            f"(calibratable: {', '.join(HARDWARE_RANGES)})")
    for name in round_parameters:
        if name not in ROUND_FACTORS:
            raise SpecError(f"'{name}' is not a round parameter (round parameters: {', '.join(ROUND_FACTORS)})")


def parse_parameters(text: str | None) -> tuple[str, ...] | None:
    """The hardware parameters named in a comma-separated ``--parameters`` value (None: not given).

    Raises SpecError for an empty list, a repeated name or a name without a documented range."""
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(","))
    if not names or any(not n for n in names):
        raise SpecError(f"--parameters: expected comma-separated efficiency field names, got '{text}'")
    if len(set(names)) != len(names):
        raise SpecError(f"--parameters: '{text}' names a parameter twice")
    check_names(names, ())
    return names


__all__ = ["value_bound_findings", "parse_parameters", "Range", "HARDWARE_RANGES", "KERNEL_PARAMETERS", "HOST_PARAMETERS", "ROUND_FACTORS", "RoundFactor", "Parameter", "Finding", "BOUND_TOLERANCE",
           "hardware_parameters", "round_parameters", "round_values", "round_chain", "bound_findings",
           "monotone_violations", "step_support", "check_names", "improvement"]
