"""Scenario: the traffic a system serves and the latency limits it must meet.

A discriminated union on ``kind``: ``offline`` (maximum throughput, no latency limit), ``server``
and ``interactive`` (arrivals Poisson as in MLPerf's Server scenario unless
``workload.arrival_dispersion`` says otherwise; p99 TTFT and p99 TPOT limits; Interactive is Server
with tighter limits). The ``optimizations`` block lists toggles.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, NonNegativeFloat, RootModel, PositiveFloat, PositiveInt, model_validator

from ._base import Spec
from .hardware import Precision

MIN_TOKENS = 1
"""The shortest length a request can have, each way (its prompt, its first token)."""
MAX_TOKENS = 10_000_000
"""The longest length any input may give (scenario fields, CLI overrides, trace columns)."""
Tokens = Annotated[float, Field(ge=MIN_TOKENS, le=MAX_TOKENS)]
Weight = Annotated[float, Field(ge=0, le=1e15)]
"""A histogram weight (a count or a probability): non-negative, at most 1e15."""


class LengthSpec(Spec):
    """A token-length distribution: a mean, optionally quantiles or a histogram.

    With quantiles or a histogram the distribution's shape enters the p99 latencies and the
    length-biased KV occupancy; with a mean alone the length is taken as fixed.
    """

    mean: Tokens
    """Mean length, tokens."""
    p50: Tokens | None = None
    """Median, tokens."""
    p90: Tokens | None = None
    """90th percentile, tokens."""
    p99: Tokens | None = None
    """99th percentile, tokens."""
    max: Tokens | None = None
    """Largest length (cap), tokens."""
    histogram: list[Annotated[tuple[Tokens, Weight], Field(strict=False)]] | None = Field(default=None, max_length=10_000_000)
    """Optional (length, weight) pairs; weights need not sum to 1."""
    estimate: bool = False
    """True when the figures are estimates rather than measured statistics."""

    @model_validator(mode="after")
    def _check(self):
        qs = [q for q in (self.p50, self.p90, self.p99, self.max) if q is not None]
        if any(b < a for a, b in zip(qs, qs[1:])):
            raise ValueError("quantiles must be non-decreasing: p50 <= p90 <= p99 <= max")
        if self.histogram is not None and not self.histogram:
            raise ValueError("histogram must not be empty")
        if self.histogram is not None and sum(w for _, w in self.histogram) <= 0:
            raise ValueError("histogram weights must sum to more than 0")
        return self

    @cached_property
    def support(self) -> tuple[np.ndarray, np.ndarray]:
        """(lengths, probabilities) of a discrete distribution matching the spec."""
        return length_support(self)

    @property
    def second_moment(self) -> float:
        """E[L^2], tokens^2."""
        x, p = self.support
        return float(np.sum(p * x * x))

    def quantile(self, q: float) -> float:
        """Length at probability ``q`` (0..1), tokens."""
        x, p = self.support
        c = np.cumsum(p)
        return float(x[min(np.searchsorted(c, q - 1e-12), len(x) - 1)])


def length_support(spec: LengthSpec, n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Discretize a LengthSpec into ``n`` equally likely points (or its histogram).

    Notes
    -----
    Quantile knots (p50, p90, p99, max) are joined linearly in probability; the lower end is
    placed so that the distribution's mean equals ``mean``, then the points are rescaled to the
    mean exactly. With only a mean the length is deterministic.
    """
    if spec.histogram is not None:
        x = np.array([h[0] for h in spec.histogram], float)
        w = np.array([h[1] for h in spec.histogram], float)
        return x, w / w.sum()
    knots = [(q, v) for q, v in ((0.5, spec.p50), (0.9, spec.p90), (0.99, spec.p99), (1.0, spec.max)) if v is not None]
    if len(knots) == 1 and spec.max is not None:
        knots = []  # a cap alone says nothing about the shape: keep the length fixed at the mean
    if not knots:
        return np.array([spec.mean]), np.array([1.0])
    u = (np.arange(n) + 0.5) / n
    qs = np.array([k[0] for k in knots])
    vs = np.array([k[1] for k in knots])
    if qs[-1] < 1.0:  # extend the last segment's slope to u = 1
        slope = (vs[-1] - vs[-2]) / (qs[-1] - qs[-2]) if len(qs) > 1 else 0.0
        qs, vs = np.append(qs, 1.0), np.append(vs, vs[-1] + slope * (1.0 - qs[-1]))

    def points(lo: float) -> np.ndarray:
        return np.interp(u, np.concatenate([[0.0], qs]), np.concatenate([[lo], vs]))

    # the mean is affine in the lower end ``lo``: solve, then keep lo within [1, first knot]
    m0, m1 = points(0.0).mean(), points(1.0).mean()
    lo = (spec.mean - m0) / (m1 - m0) if m1 != m0 else 1.0
    x = points(float(np.clip(lo, 1.0, vs[0])))
    x = x * (spec.mean / x.mean())
    return x, np.full(n, 1.0 / n)


class WorkloadSpec(Spec):
    isl: LengthSpec | None = None
    """Input (prompt) length per request (required unless ``trace`` is given)."""
    osl: LengthSpec | None = None
    """Output (generated) length per request (required unless ``trace`` is given)."""
    trace: str | None = None
    """CSV file of requests, relative to the scenario file: columns ``isl`` and ``osl`` (tokens,
    kept as pairs), optionally ``arrival_s`` (arrival times: their measured dispersion replaces
    ``arrival_dispersion``) and ``prefix_id`` + ``prefix_tokens`` (shared prefixes: they set
    ``prefix_share_fraction`` and ``prefix_working_set_tokens``). See ``infersim.specs.traffic``."""
    arrival_dispersion: float = Field(default=1.0, ge=0, le=100)
    """Squared coefficient of variation c_a² of the inter-arrival times (for a renewal process
    also the long-run index of dispersion of arrival counts): 1 = Poisson (MLPerf loadgen's Server
    scenario), 0 = evenly spaced, > 1 bursty. Range [0, 100]."""
    arrival_states: list[Annotated[tuple[Annotated[float, Field(gt=0, le=1000)], Annotated[float, Field(gt=0, le=1)]],
                                   Field(strict=False)]] | None = Field(default=None, min_length=2, max_length=8)
    """Arrivals switching slowly between rates (a Markov-modulated Poisson process whose states
    last long against a request's latency): [rate / mean rate, share of time] per state (set from
    a trace; None: one state). The shares sum to 1 and the rate factors average to 1 over them.
    Arrivals are Poisson within a state; ``arrival_dispersion`` then applies only to the
    disaggregated prefill pool's queue."""
    isl_osl_mean: float | None = Field(default=None, gt=0, le=1e14)
    """E[ISL·OSL] of paired lengths, tokens² (set from a trace; None: lengths independent)."""
    prefix_share_fraction: float = Field(default=0.0, ge=0, le=1)
    """Fraction of input tokens that are a prefix shared with earlier requests (reusable KV)."""
    prefix_working_set_tokens: float | None = Field(default=None, gt=0, le=1e15)
    """Distinct shareable-prefix tokens the traffic reuses (None: the serving default, 1e6)."""
    images_per_request: NonNegativeFloat = Field(default=0.0, le=1000)
    """Images per request for multimodal models (vision encoder runs once per image)."""
    image_pixels: PositiveFloat | None = Field(default=None, le=1e9)
    """Pixels per image for multimodal requests (every image the same size)."""
    image_tokens: LengthSpec | None = None
    """Language-model tokens per image (after the encoder's patch merge) as a distribution, in
    place of ``image_pixels`` when image sizes vary: the encoder's full attention within an image
    grows with the square of its patches, so the spread matters, not only the mean."""

    @model_validator(mode="after")
    def _states(self):
        if self.arrival_states is not None:
            share = sum(w for _, w in self.arrival_states)
            mean = sum(f * w for f, w in self.arrival_states)
            if abs(share - 1.0) > 1e-6 or abs(mean - 1.0) > 1e-6:
                raise ValueError("arrival_states: shares of time must sum to 1 and the rate factors average to 1 "
                                 f"over them (got {share:.6g} and {mean:.6g})")
        return self

    @model_validator(mode="after")
    def _lengths(self):
        if self.image_pixels is not None and self.image_tokens is not None:
            raise ValueError("give image_pixels (one size) or image_tokens (a distribution), not both")
        if self.trace is None:
            for name in ("isl", "osl"):
                if getattr(self, name) is None:
                    raise ValueError(f"{name}: Field required (or give a trace file)")
        return self


class SloSpec(Spec):
    """Latency limits at a percentile (MLPerf: p99 of TTFT and of TPOT)."""

    ttft_ms: PositiveFloat | None = Field(default=None, le=1e7)
    """Limit on time to first token at the percentile, ms."""
    tpot_ms: PositiveFloat | None = Field(default=None, le=1e6)
    """Limit on time per output token (per-request mean after the first) at the percentile, ms."""
    e2e_ms: PositiveFloat | None = Field(default=None, le=1e8)
    """Limit on end-to-end request latency at the percentile, ms (MLPerf Qwen3-VL)."""
    percentile: float = Field(default=99.0, gt=0, lt=100)
    """Percentile the limits apply to."""

    @model_validator(mode="after")
    def _check(self):
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("slo needs at least one of ttft_ms, tpot_ms, e2e_ms")
        return self


SLO_FIELDS = tuple(SloSpec.model_fields)
"""``SloSpec``'s fields, in order: what a latency-limit override may set and the outputs report."""


class PrecisionSpec(Spec):
    """Numeric formats. 'auto' picks the narrowest format the hardware runs natively."""

    weights: Precision | Literal["auto"] = "auto"
    """Linear-layer weights ('auto': fp4 where supported, else fp8, else bf16)."""
    activations: Precision | Literal["auto"] = "auto"
    """GEMM activations ('auto': as weights)."""
    kv_cache: Precision | Literal["auto"] = "auto"
    """KV cache ('auto': fp8 where supported, else bf16)."""


class OptimizationEntry(Spec):
    """One toggle in a scenario's ``optimizations`` list; its parameters are checked against
    the registered transform of that ``kind``."""

    model_config = Spec.model_config | {"extra": "allow"}
    kind: str
    """Registered optimization name (see ``infersim run --help``)."""
    enabled: bool = True
    """False keeps the entry but leaves the optimization neutral."""


class ScenarioHeader(Spec):
    """What every scenario, LLM or not, says about itself."""

    name: str
    """Human-readable name."""
    description: str = ""
    source: list[str] = Field(min_length=1)
    """Where the limits and lengths come from."""
    benchmark: str | None = None
    """MLPerf benchmark this scenario reproduces, if any (e.g. 'deepseek-r1')."""
    model: str | None = None
    """Default model ID for this scenario (the MLPerf benchmark's model)."""


class _ScenarioBase(ScenarioHeader):
    workload: WorkloadSpec
    precision: PrecisionSpec = PrecisionSpec()
    max_batch: PositiveInt | None = Field(default=None, le=1_000_000)
    """Engine limit on concurrent sequences per instance (null = memory decides)."""
    optimizations: list[OptimizationEntry] = Field(default_factory=list)
    """Serving optimizations to apply (see the optimizations issue for kinds)."""


class OfflineScenario(_ScenarioBase):
    """All requests available at once; the metric is maximum output tokens/s."""

    kind: Literal["offline"]


class ServerScenario(_ScenarioBase):
    """Arrivals at a rate (Poisson unless ``workload.arrival_dispersion`` ≠ 1); throughput at the
    highest rate meeting the p99 limits."""

    kind: Literal["server", "interactive"]
    slo: SloSpec


ScenarioSpec = Annotated[Union[OfflineScenario, ServerScenario], Field(discriminator="kind")]


class ScenarioFile(RootModel[ScenarioSpec]):
    """A scenario YAML document (the union dispatched on ``kind``)."""


def load_trace(path: Path) -> tuple[LengthSpec, LengthSpec]:
    """Read a CSV trace into two histogram LengthSpecs (isl, osl); ``traffic.read_trace`` checks it.

    Errors name the file, the row and the column; lengths must be positive integer token counts.
    """
    from .traffic import read_trace, workload_update

    upd = workload_update(read_trace(Path(path)))
    return upd["isl"], upd["osl"]


def apply_trace(workload: WorkloadSpec, path: Path) -> WorkloadSpec:
    """``workload`` with the trace at ``path`` in place of its lengths (and arrival dispersion and
    prefix reuse where the trace has those columns)."""
    from .traffic import read_trace, workload_update

    return workload.model_copy(update=workload_update(read_trace(Path(path))))


def with_trace(scenario, base_dir: Path):
    """The scenario with its trace (if any) loaded into isl/osl histograms."""
    wl = scenario.workload
    if wl.trace is None:
        return scenario
    path = Path(wl.trace)
    if not path.is_absolute():
        path = base_dir / path
    return scenario.model_copy(update={"workload": apply_trace(wl, path)})
