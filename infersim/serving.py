"""Serving under load: continuous batching in steady state, MLPerf scenario semantics.

Offline: every decode step carries B sequences and, on average, the prefills of the B·L/OSL
requests that replace finished ones (L output tokens per sequence per step); throughput is
B·L / step time. Server/Interactive (MLPerf loadgen "Server", rules v5.1-v6.0): Poisson arrivals;
each engine cycle is a decode step of the B running sequences extended by the prefills admitted
at its start (a gated single-server queue with vacations). From the cycle moments we get the
arrival rate that sustains occupancy B (Little's law), p99 TTFT and p99 per-request TPOT.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import math
from statistics import NormalDist

from .engine import StepCost, step_cost
from .graph import VISION_PATCH_PIXELS, Layout, Shape
from .plan import Plan




@dataclass(frozen=True)
class WorkloadStats:
    """Moments of the request mix, tokens (already net of prefix-cache hits where noted)."""

    isl_mean: float
    isl_sq: float
    osl_mean: float
    osl_sq: float
    osl_points: np.ndarray
    osl_probs: np.ndarray
    osl_p99: float
    vision_patches: float = 0.0
    """Vision-encoder patches per request (multimodal models; 0 for text)."""
    vision_patches_sq: float = 0.0
    """Sum over a request's images of the squared patches per image, expected value: the
    encoder's full attention within each image costs this, not the square of the mean."""
    isl_points: np.ndarray | None = None
    """Prompt-length support (tokens) and its probabilities, for the busiest-rank distribution."""
    isl_probs: np.ndarray | None = None
    isl_max: float | None = None
    """Longest prompt (tokens): the spec's ``max`` where given, else the support's largest point."""
    arrival_scv: float = 1.0
    """c_a² of the inter-arrival times (1: Poisson); the index of dispersion of arrival counts."""
    isl_osl_mean: float | None = None
    """E[ISL·OSL] of paired lengths, tokens² (None: ISL and OSL independent)."""
    rate_states: tuple[tuple[float, float], ...] | None = None
    """Slowly switching arrival rates: (rate / mean rate, share of time) per state (None: one)."""

    @property
    def context_mean(self) -> float:
        """Mean context of a sequence in flight: E[ISL·OSL]/E[OSL] + E[OSL²]/(2·E[OSL]).

        A request stays in flight for a time ∝ its OSL, so the running sequences are
        OSL-length-biased: their prompts average E[ISL·OSL]/E[OSL] (E[ISL] when the lengths are
        independent) and their progress E[OSL²]/(2·E[OSL])."""
        prompt = self.isl_mean if self.isl_osl_mean is None else self.isl_osl_mean / self.osl_mean
        return prompt + self.osl_sq / (2.0 * self.osl_mean)

    @property
    def osl_scv(self) -> float:
        """Squared coefficient of variation of the output length, E[OSL²]/E[OSL]² − 1: the long-run
        dispersion of a slot's refills (a request after each finished one)."""
        return self.osl_sq / self.osl_mean**2 - 1.0

    @property
    def prompt_overshoot(self) -> float:
        """Mean overshoot of the prompts' renewal sum past a token budget, E[ISL²]/(2·E[ISL]): the
        rest of the prompt that crosses a chunked budget, the gap whole prompts leave unused."""
        return self.isl_sq / (2.0 * self.isl_mean)

    def with_output_mean(self, osl_mean: float | None) -> "WorkloadStats":
        """These stats with the output lengths scaled to mean ``osl_mean`` (the distribution keeps
        its shape); unchanged for None or a non-positive mean. A run's own generated tokens per
        sample (LoadGen's, an input of the load, not a latency) set the load it carried in tokens
        (``at_load``, operating-point fits): qps × this mean, and each request holds its decode slot
        that many iterations (Little's law), so near the engine's plateau a few per cent here move
        the occupancy that carries the rate a lot."""
        if not osl_mean or not osl_mean > 0:
            return self
        k = float(osl_mean) / self.osl_mean
        return replace(self, osl_mean=self.osl_mean * k, osl_sq=self.osl_sq * k * k, osl_points=self.osl_points * k,
                       osl_p99=self.osl_p99 * k,
                       isl_osl_mean=None if self.isl_osl_mean is None else self.isl_osl_mean * k)

    @classmethod
    def from_workload(cls, workload, model=None) -> "WorkloadStats":
        """Moments of ``workload``; with a multimodal ``model`` each request's images add their
        LM tokens to its prompt and their patches to the encoder (see ``image_load``)."""
        xi, pi = workload.isl.support
        isl_max = float(workload.isl.max) if workload.isl.max else float(np.max(xi))
        image = image_load(workload, model)
        patches, patches_sq, image_tokens = 0.0, 0.0, 0.0
        if image is not None:
            (vt, vp), merge = image
            k = workload.images_per_request
            image_tokens = k * float(np.sum(vp * vt))
            patches = merge * image_tokens
            patches_sq = k * merge ** 2 * float(np.sum(vp * vt * vt))
            xi, pi = _sum_of_independent(xi, pi, k * vt, vp)
            cap = workload.image_tokens.max if workload.image_tokens is not None else None
            isl_max += k * float(cap if cap else np.max(vt))
        xo, po = workload.osl.support
        osl_mean = float(np.sum(po * xo))
        paired = getattr(workload, "isl_osl_mean", None)
        # images independent of the output: E[(ISL + I)·OSL] = E[ISL·OSL] + E[I]·E[OSL]
        paired = None if paired is None else paired + image_tokens * osl_mean
        # compress the output-length distribution to 16 quantile points for tail sums
        c = np.cumsum(po)
        u = (np.arange(16) + 0.5) / 16
        pts = xo[np.minimum(np.searchsorted(c, u), len(xo) - 1)]
        isl_mean, isl_sq = float(np.sum(pi * xi)), float(np.sum(pi * xi * xi))
        if len(xi) > 64:  # a text x image convolution: 64 equally likely points keep the mean
            xi, pi = _equal_mass_points(xi, pi, 64)
        return cls(isl_mean=isl_mean, isl_sq=isl_sq,
                   osl_mean=osl_mean, osl_sq=float(np.sum(po * xo * xo)),
                   osl_points=pts, osl_probs=np.full(16, 1 / 16), osl_p99=workload.osl.quantile(0.99),
                   vision_patches=patches, vision_patches_sq=patches_sq,
                   isl_points=np.asarray(xi, dtype=float), isl_probs=np.asarray(pi, dtype=float), isl_max=isl_max,
                   arrival_scv=float(getattr(workload, "arrival_dispersion", 1.0)), isl_osl_mean=paired,
                   rate_states=None if getattr(workload, "arrival_states", None) is None
                   else tuple((float(f), float(w)) for f, w in workload.arrival_states))


def image_load(workload, model):
    """((LM tokens per image, probabilities), patches per LM token) of a multimodal request, or
    None for a text model or a request without images.

    Notes
    -----
    ``image_tokens`` gives the distribution directly; ``image_pixels`` one size, whose LM tokens
    are pixels / ``pixels_per_token``. The encoder runs on ``pixels_per_token`` / 256 patches
    (16x16 pixels) per LM token: 4 for Qwen3-VL's 2x2 spatial merge (models.md).
    """
    venc = getattr(model, "vision_encoder", None)
    if venc is None or not workload.images_per_request:
        return None
    if workload.image_tokens is not None:
        support = workload.image_tokens.support
    elif workload.image_pixels:
        support = (np.array([workload.image_pixels / venc.pixels_per_token]), np.array([1.0]))
    else:
        return None
    return support, venc.pixels_per_token / VISION_PATCH_PIXELS


def _sum_of_independent(xa, pa, xb, pb):
    """Support of A + B for independent discrete A and B."""
    return (np.asarray(xa, float)[:, None] + np.asarray(xb, float)[None, :]).ravel(), \
        (np.asarray(pa, float)[:, None] * np.asarray(pb, float)[None, :]).ravel()


def _equal_mass_points(x, p, n):
    """``n`` equally likely points: the conditional means of the n probability slices of the
    sorted distribution (the mean is kept exactly)."""
    order = np.argsort(x)
    x, p = np.asarray(x, float)[order], np.asarray(p, float)[order] / np.sum(p)
    edges = np.linspace(0.0, 1.0, n + 1)
    c = np.concatenate([[0.0], np.cumsum(p)])
    # probability of point j inside slice i: overlap of [c_j, c_j+1] with [e_i, e_i+1]
    lo = np.maximum(c[:-1][None, :], edges[:-1][:, None])
    hi = np.minimum(c[1:][None, :], edges[1:][:, None])
    w = np.clip(hi - lo, 0.0, None)
    return (w @ x) / np.maximum(w.sum(axis=1), 1e-300), np.full(n, 1.0 / n)


@dataclass
class ServingResult:
    """Per-instance serving figures over a grid (arrays, same shape).

    tokens_per_s: completed output tokens/s of one instance. rate: requests/s per instance.
    ttft_p99 / tpot_p99 / ttft_mean / tpot_mean: seconds. step: the decode step's StepCost.
    """

    tokens_per_s: np.ndarray
    rate: np.ndarray
    ttft_mean: np.ndarray
    ttft_p99: np.ndarray
    tpot_mean: np.ndarray
    tpot_p99: np.ndarray
    e2e_p99: np.ndarray
    step: StepCost
    prefill_share: np.ndarray
    """Fraction of engine time spent on prefill work."""
    shape: Shape | None = None
    """The engine step whose cost is ``step`` (what ``explain`` prices)."""


def rank_imbalance(prompts_per_step, dp):
    """Busiest attention-DP rank's share of a step's prompt tokens over the mean share.

    Notes
    -----
    n prompts spread over dp ranks, each prompt on one rank: the busiest rank holds
    ⌈n/dp⌉ ≈ max(1, n/dp) prompts against a mean of n/dp, so the factor is max(1, dp/n)
    (at most dp). Reference: vLLM wide-EP blog (effects.md section 2): a compute-bound prefill
    stalls the whole EP group.
    """
    n = np.maximum(np.asarray(prompts_per_step, dtype=float), 1e-9)
    dp = np.asarray(dp, dtype=float)
    return np.clip(dp / n, 1.0, dp)


def prefix_hit(plan: Plan, workers):
    """Share of input tokens found in the prefix cache (broadcasts over ``workers``).

    Notes
    -----
    Load-balancing router: h/N (a request lands on the worker holding its prefix with
    probability 1/N). KV-aware router: h·η·min(1, N·cache/working_set).
    Reference: shared/reference/effects.md section 3.
    """
    sv = plan.serving
    workers = np.maximum(np.asarray(workers, dtype=float), 1.0)
    if sv.prefix_share == 0:
        return np.zeros_like(workers)
    if sv.kv_aware_efficiency > 0:
        cap = np.ones_like(workers) if sv.prefix_cache_tokens is None else np.minimum(
            1.0, workers * sv.prefix_cache_tokens / sv.prefix_working_set_tokens)
        return sv.prefix_share * sv.kv_aware_efficiency * cap
    return sv.prefix_share / workers


def _prefill(stats: WorkloadStats, hit):
    miss = 1.0 - hit
    return stats.isl_mean * miss, stats.isl_sq * miss * miss


def offline_shape(plan: Plan, layout: Layout, batch, stats: WorkloadStats, workers=1.0) -> Shape:
    """An offline steady-state step: B sequences decode, and the B·L/OSL prompts that replace the
    finished ones are prefilled in the same step."""
    L = plan.serving.tokens_per_step
    plen, plen_sq = _prefill(stats, prefix_hit(plan, workers))
    n_prefill = batch * L / stats.osl_mean
    return Shape(decode_seqs=batch, decode_q=1.0 + plan.serving.draft_depth, decode_ctx=stats.context_mean,
                 prefill_seqs=n_prefill, prefill_len=plen, prefill_len_sq=plen_sq,
                 prefill_rank_imbalance=rank_imbalance(n_prefill, layout.dp), prefill_patches=stats.vision_patches,
                  prefill_patches_sq=stats.vision_patches_sq)


def offline(plan: Plan, layout: Layout, batch, stats: WorkloadStats, workers=1.0) -> ServingResult:
    """Offline steady state: decode B sequences plus the prefills that keep B constant."""
    L = plan.serving.tokens_per_step
    shape = offline_shape(plan, layout, batch, stats, workers)
    cost = step_cost(plan, layout, shape)
    t = cost.total + plan.engine.host_time(batch)  # a Python executor's responses, as in Server
    tokens = batch * L / t
    rate = tokens / stats.osl_mean
    tpot = t / L
    ttft = t  # a request's prefill completes within one (mixed) step once it is admitted
    share = np.zeros_like(t)
    return ServingResult(tokens, rate, ttft, ttft, tpot, tpot, ttft + stats.osl_p99 * tpot, cost, share, shape)


_erfc = np.vectorize(math.erfc, otypes=[float])


def mixture_z(weights, probs, q: float, iters: int = 60) -> float:
    """z solving Σ p_j·Q(z·w_j) = 1 − q: the q-quantile of Σ p_j N(0, 1/w_j²) (scalar bisection;
    memoized on the values, which are a handful per workload)."""
    w, p = np.asarray(weights, dtype=float), np.asarray(probs, dtype=float)
    return _mixture_z(tuple(w.ravel().tolist()), w.shape, tuple(p.ravel().tolist()), p.shape, float(q), iters)


@lru_cache(maxsize=256)
def _mixture_z(w: tuple, w_shape: tuple, p: tuple, p_shape: tuple, q: float, iters: int) -> float:
    weights = np.asarray(w, dtype=float).reshape(w_shape)
    probs = np.asarray(p, dtype=float).reshape(p_shape)
    lo, hi = 0.0, 10.0 / max(float(np.min(weights)), 1e-12)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        tail = float(np.sum(probs * 0.5 * _erfc(mid * weights / np.sqrt(2))))
        lo, hi = (mid, hi) if tail > 1.0 - q else (lo, mid)
    return 0.5 * (lo + hi)


DRIFT_FEEDBACK_POWER = 1.0
"""Exponent k of the decode count's variance amplification 1/(1 − ε)^k by its own feedback
(``decode_drift``): the linear-noise variance of a count whose relaxation rate its feedback slows
by 1 − ε. Checked against des.simulate_engine (``python benchmarks/tpot_spread.py``, 2026-11-26,
24,000 requests, seed 3): p99 TPOT −2.7 … −0.3 % at 200-400-token outputs and −0.8 … +2.1 % at
50-1,600, loads 30-90 %, batch caps 256 and 512; with the prefill stalls' clusters (``decode_drift``'s
``rho``, 2026-11-29) −1.6 … +1.7 % and −0.7 … +3.2 %."""

DRIFT_STEP = 0.02
"""Relative occupancy step of the finite difference that gives the decode step's slope dt_d/dB."""

DRIFT_EPS_MAX = 0.8
"""Largest step elasticity ε the amplification takes (it diverges as ε → 1, where the linear
picture fails and the count wanders to the batch cap)."""


@lru_cache(maxsize=128)
def _window_var(osl_points: tuple | None, osl_probs: tuple | None, osl_mean: float, osl_p99: float, L: float):
    """Per output-length class j, the variance of the decode count averaged over that request's own
    decode window, per unit mean count (and the same for the ``osl_p99`` request's window).

    The count is an M/G/∞ in iteration clock: arrivals stay S = OSL/L − 1 iterations, so its
    autocovariance at lag s is λ·E[(S − s)⁺] and its mean λ·E[S]; averaged over a window of w
    iterations, Var = (2/w²)·∫₀^w (w − s)·Cov(s) ds. With I(w, S) = ∫₀^a (w − s)(S − s) ds,
    a = min(w, S), Var / mean = 2·Σ_k p_k I(w, S_k) / (w²·E[S]) (2/3 for one length)."""
    if osl_points is None:
        S, p = np.array([max(osl_mean / L - 1.0, 1.0)]), np.ones(1)
    else:
        S = np.maximum(np.asarray(osl_points, dtype=float) / L - 1.0, 1.0)
        p = np.asarray(osl_probs, dtype=float)
        p = p / p.sum()
    mean_s = float(np.sum(p * S))

    def v(w):
        a = np.minimum(w, S)
        integral = w * S * a - (w + S) * a * a / 2.0 + a**3 / 3.0
        return 2.0 * float(np.sum(p * integral)) / (w * w * mean_s)

    return tuple(v(w) for w in S), v(max(osl_p99 / L - 1.0, 1.0))


def decode_slope(plan: Plan, layout: Layout, decode: Shape, batch, t_d, host=None):
    """dt_d/dB of the decode step ``decode`` (time ``t_d`` at occupancy ``batch``) by a finite step
    of ``DRIFT_STEP``: the same shape at (1 + ``DRIFT_STEP``)·B sequences, each with its KV, plus
    ``host(B)`` where the step carries a host time per sequence (``Engine.host_time``)."""
    batch = np.asarray(batch, dtype=float)
    up = batch * (1.0 + DRIFT_STEP)
    t_up = step_cost(plan, layout, replace(decode, decode_seqs=up)).total + (0.0 if host is None else host(up))
    return (t_up - t_d) / (up - batch)


def decode_drift(slope, batch, t_d, L, stats: "WorkloadStats", q: float, rho=0.0):
    """The slow part of a request's TPOT: the decode count's drift over the request's own window.

    A request's TPOT averages the iterations it decodes in. Their fast noise (the prompts admitted
    per iteration) averages out as 1/√n over its n iterations; the decode count B does not: it
    moves on the time scale of a request's life, so a request that lives through a busy stretch
    sees slower iterations throughout. With the decode step's slope ``slope`` = dt_d/dB (per
    iteration, stalls excluded), the count's window variance per unit mean from ``_window_var``
    amplified by its own feedback (a longer step brings more arrivals per iteration:
    1/(1 − ε)^k, ε = slope·B/t_d the step's elasticity, ``DRIFT_FEEDBACK_POWER``), the TPOT
    deviation of class j has sd slope·√(B·F·v_j)/L.

    ``rho``: the iterations' prefill share, counted for the prompts prefilled as they come. The
    arrivals an iteration gathers are not Poisson in the iteration clock: a prompt's stall lengthens
    the iteration that prefills it, which gathers λ·S more arrivals, whose stalls lengthen the
    next — a branching process of mean ρ, whose clusters make the count of arrivals over a window
    (so the decode count) 1/(1 − ρ)² times as variable per unit mean as Poisson arrivals (a
    cluster's size T: E[T²]/E[T] = 1/(1 − ρ)²); the amplitude takes its root. des.simulate_engine
    with a flat decode step (tests/test_scheduler.py): the count's variance per unit mean 1.54 at
    ρ = 0.2 (1.56), 2.67 at 0.35 (2.37), 5.0 at 0.5 (4.0).

    Returns (A, z, sd99): the class amplitude A = slope·√(B·F)/((1 − ρ)·L) and the mixture z of the
    classes' √v_j at ``q`` (so the drift's q-quantile is A·z), and the ``osl_p99`` request's sd per
    iteration, slope·√(B·F·v₉₉)/(1 − ρ)."""
    key = (None, None) if stats.osl_points is None else (tuple(stats.osl_points), tuple(stats.osl_probs))
    v, v99 = _window_var(*key, float(stats.osl_mean), float(stats.osl_p99), float(L))
    batch = np.asarray(batch, dtype=float)
    slope = np.maximum(np.asarray(slope, dtype=float), 0.0)
    eps = np.clip(slope * batch / np.maximum(t_d, 1e-30), 0.0, DRIFT_EPS_MAX)
    spread = slope * np.sqrt(batch / (1.0 - eps) ** DRIFT_FEEDBACK_POWER) / (1.0 - np.asarray(rho, dtype=float))
    probs = stats.osl_probs if stats.osl_points is not None else np.ones(1)
    z = mixture_z(1.0 / np.sqrt(np.asarray(v)), probs, q)
    return spread / L, z, spread * math.sqrt(v99)


def _norm_cdf(z):
    """Φ(z) (Abramowitz-Stegun 7.1.26, |error| < 1.5e-7), vectorized."""
    # the same operations as Φ = where(z ≥ 0, 1 − h, h), h = ½·t·P(t)·exp(−x²), done in place
    z = np.asarray(z, dtype=float)
    x = np.abs(z)
    x /= np.sqrt(2.0)
    t = 0.3275911 * x
    t += 1.0
    np.divide(1.0, t, out=t)
    h = t * 1.061405429
    for coef in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        h += coef
        h *= t
    h *= 0.5
    x *= x
    np.negative(x, out=x)
    h *= np.exp(x, out=x)
    out = 1.0 - h
    np.copyto(out, h, where=~(z >= 0))
    return out


def gamma_cdf(x, mean, var):
    """P(X ≤ x) of a gamma with the given mean and variance (Wilson-Hilferty, broadcasts)."""
    return gamma_cdf_at(x, gamma_cdf_terms(mean, var))


def gamma_cdf_terms(mean, var):
    """The x-independent terms of ``gamma_cdf`` (mean, 1 − c, √c), for many evaluations."""
    mean = np.maximum(mean, 1e-30)
    c = np.maximum(var, 1e-30 * mean * mean) / (9.0 * mean * mean)
    return mean, 1.0 - c, np.sqrt(c)


def gamma_cdf_at(x, terms):
    """``gamma_cdf`` at x from its ``gamma_cdf_terms``."""
    mean, one_less_c, root_c = terms
    return _norm_cdf((np.cbrt(np.maximum(x, 0.0) / mean) - one_less_c) / root_c)


def _wilson_hilferty(mean, var):
    """(a, b) with P(X ≤ u³) ≈ Φ(a·u + b) for a gamma of ``mean`` and ``var`` (Wilson-Hilferty)."""
    mean, one_less_c, root = gamma_cdf_terms(mean, var)
    return 1.0 / (np.cbrt(mean) * root), -one_less_c / root


ROOT_RTOL = 1e-12
"""The quantile solvers' stop: a point whose Newton correction (or half bisection bracket) is within
this fraction of it is at its root and stays there. Without it, a point at its root sits on an end
of its bracket, so the bracket test sends it halfway across the bracket and the remaining
iterations have to find the root again (a fixed 20 iterations left some quantiles 1e-4 off, 10
up to 45 %)."""


def at_root(x, newton):
    """Where a safeguarded Newton iteration's point ``x`` is at its root: its Newton correction is
    within ``ROOT_RTOL`` of it. Such a point must stay (it is also an end of its bracket, where a
    bracket test would send it away)."""
    return np.abs(x - newton) <= ROOT_RTOL * np.abs(x)


def newton_or_bisect(x, newton, lo, hi, mid):
    """The next point of a safeguarded Newton iteration: ``x`` where it is at its root (``at_root``),
    else the Newton point inside the bracket (lo, hi), else ``mid``; and the at-root mask."""
    stay = at_root(x, newton)
    return np.where(stay, x, np.where((newton > lo) & (newton < hi), newton, mid)), stay


def _two_gamma_quantile(w1, m1, v1, w2, m2, v2, q, iters: int = 20):
    """q-quantile of w1·Gamma(m1, v1) + w2·Gamma(m2, v2) (means, variances; broadcasts).

    Notes
    -----
    In u = x^(1/3) each Wilson-Hilferty component is Φ(a·u + b), so the mixture CDF is smooth and
    increasing in u. The root lies between the components' own q-quantiles (the mixture CDF is a
    convex combination of theirs), which brackets it tightly; safeguarded Newton steps (the
    rtsafe rule) refine it. Where the second weight is below 1e-9 the first component's
    quantile is already the root to that probability, and no iteration is spent.
    """
    return _two_gamma_quantiles(w1, m1, v1, w2, m2, v2, (q,), iters)[0]


def _two_gamma_quantiles(w1, m1, v1, w2, m2, v2, qs, iters: int = 20) -> list:
    """``_two_gamma_quantile`` at each of ``qs``, the Wilson-Hilferty terms computed once and every
    q solved in one pass (the arrays stacked along a leading axis, one layer per q)."""
    a1, b1 = _wilson_hilferty(m1, v1)
    a2, b2 = _wilson_hilferty(m2, v2)
    arrays = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (w1, w2, a1, b1, a2, b2)))
    shape = (len(qs),) + arrays[0].shape
    layer = (len(qs),) + (1,) * arrays[0].ndim
    stacked = [np.broadcast_to(a, shape).copy() for a in arrays]
    q = np.broadcast_to(np.reshape(np.asarray(qs, dtype=float), layer), shape).copy()
    z_q = np.broadcast_to(np.reshape([NormalDist().inv_cdf(x) for x in qs], layer), shape).copy()
    out = _solve_two_gamma(*stacked, q, z_q, iters)
    return [out[i] for i in range(len(qs))]


def _solve_two_gamma(w1, w2, a1, b1, a2, b2, q, z_q, iters):
    """Safeguarded Newton in u = x^(1/3) for the q-quantiles (``q`` and z_q = Φ⁻¹(q) arrays)."""
    u1, u2 = np.maximum((z_q - b1) / a1, 0.0), np.maximum((z_q - b2) / a2, 0.0)
    out = u1.copy()
    mixed = w2 > 1e-9
    if np.any(mixed):
        w1, w2, a1, b1, a2, b2, u1, u2, q = (x[mixed] for x in (w1, w2, a1, b1, a2, b2, u1, u2, q))
        lo, hi = np.minimum(u1, u2), np.maximum(u1, u2)
        u = np.where(w1 >= w2, u1, u2)
        inv_sqrt_2pi = 1.0 / math.sqrt(2.0 * math.pi)
        step_old = step = hi - lo
        flat = out.reshape(-1)  # a view: ``out`` is a fresh contiguous array
        where = np.flatnonzero(mixed)  # the points still iterating (indices into ``flat``)
        for _ in range(iters):
            z = np.stack((a1 * u + b1, a2 * u + b2))  # both components in one pass
            phi, dens = _norm_cdf(z), np.exp(-0.5 * z * z)
            f = w1 * phi[0] + w2 * phi[1] - q
            below = f < 0
            lo_new, hi_new = np.where(below, u, lo), np.where(below, hi, u)
            slope = inv_sqrt_2pi * (w1 * a1 * dens[0] + w2 * a2 * dens[1])
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                newton = u - f / slope
            # rtsafe rule: bisect when Newton leaves the bracket or is not at least halving its step,
            # never a point already at its root (``at_root``)
            stay = at_root(u, newton)
            bisect = (~((newton > lo_new) & (newton < hi_new)) | (np.abs(2.0 * f) > np.abs(step_old * slope))) & ~stay
            step_new = np.where(bisect, 0.5 * (hi_new - lo_new), np.abs(u - newton))
            u_new = np.where(bisect, 0.5 * (lo_new + hi_new), np.where(stay, u, newton))
            u, lo, hi, step_old, step = u_new, lo_new, hi_new, step, step_new
            # a point is done once its step is within ``ROOT_RTOL`` of it (a Newton step: the root to
            # rounding; a bisection: half its bracket) or it is not a number; it leaves the arrays
            done = (step <= ROOT_RTOL * np.abs(u)) | ~np.isfinite(u)
            if np.any(done):
                flat[where[done]] = u[done]
                keep = ~done
                where, u, lo, hi, step_old, step, w1, w2, a1, b1, a2, b2, q = (
                    x[keep] for x in (where, u, lo, hi, step_old, step, w1, w2, a1, b1, a2, b2, q))
                if not where.size:
                    break
        flat[where] = u
    return out ** 3


def server(plan: Plan, layout: Layout, batch, stats: WorkloadStats, percentile: float = 99.0,
           workers=1.0) -> ServingResult:
    """Renewal (by default Poisson) arrivals into an aggregated continuous-batching instance at
    mean occupancy B.

    Notes
    -----
    t_d: decode step of B sequences; S: extra step time of one request's prefill (affine in its
    ISL), so the cycle is C = t_d + Σ S over the requests admitted at its start.
    Rate sustaining occupancy B (Little): λ = B / (OSL·t_d/L + B·E[S]); ρ = λ·E[S].
    Cycle moments: E[C] = t_d/(1−ρ), Var C = λ·E[C]·E[S²]/(1−ρ²) (compound-Poisson recursion).
    TTFT = residual of the running cycle (length-biased, present with probability 1 − e^(−B),
    the chance the engine is busy under Poisson occupancy) + the next cycle containing the
    request's prefill; its p-quantile from a gamma fit of the mean and variance.
    TPOT of a request = mean of its OSL/L cycles / L; variance Var C/n·(1+ρ)/(1−ρ) (AR(1)
    correlation of successive cycles), plus the decode count's drift over the request's window
    (``decode_drift``, from the step's slope dt_d/dB), in quadrature; p-quantile over the
    output-length mix by bisection.
    Bursty or smooth arrivals (``stats.arrival_scv`` ≠ 1) enter through ``queue_metrics``.
    Validated against a discrete-event simulation of the same server in tests/test_queueing.py.
    """
    q = percentile / 100.0
    L = plan.serving.tokens_per_step
    dq = 1.0 + plan.serving.draft_depth
    plen, plen_sq = _prefill(stats, prefix_hit(plan, workers))
    decode = Shape(decode_seqs=batch, decode_q=dq, decode_ctx=stats.context_mean)
    cost = step_cost(plan, layout, decode)
    t_d = cost.total
    # Prefills admitted together share the slack of a memory-bound decode step, so the cost per
    # prefill is the average increment at the number admitted per cycle, n = λ·E[C], which equals
    # B·L/OSL exactly under λ(B) below (Little's law on the decode side); at least one.
    n = np.maximum(batch * L / stats.osl_mean, 1.0)
    mixed = Shape(decode_seqs=batch, decode_q=dq, decode_ctx=stats.context_mean,
                  prefill_seqs=n, prefill_len=plen, prefill_len_sq=plen_sq,
                  prefill_rank_imbalance=rank_imbalance(n, layout.dp), prefill_patches=stats.vision_patches,
                  prefill_patches_sq=stats.vision_patches_sq)
    s_mean = np.maximum(step_cost(plan, layout, mixed).total - t_d, 0.0) / n
    s_sq = s_mean * s_mean * (plen_sq / np.maximum(plen * plen, 1e-30))
    res = queue_metrics(t_d, s_mean, s_sq, batch, L, stats, q, cost, decode_slope(plan, layout, decode, batch, t_d))
    res.tpot_p99 = res.tpot_p99 * tpot_spread(plan, q)
    res.shape = decode
    return res


PALM_AXIS = np.geomspace(1e-3, 60.0, 100)
"""Expected arrivals per cycle x = λ·E[C*] at which the renewal corrections are tabulated."""


@lru_cache(maxsize=256)
def _palm_table(scv: float) -> tuple[np.ndarray, np.ndarray]:
    """(mean excess, variance excess) over x of the other arrivals in a window of x mean gaps
    holding a tagged arrival at a uniform position, for gamma-renewal arrivals with c_a² = scv.

    Notes
    -----
    Seen from an arrival, a renewal process starts afresh on both sides, and the two sides are
    independent. After an arrival the count N(t) has P(N(t) ≥ n) = F_n(t), the n-fold gamma
    convolution (shape n/c_a², in units of the mean gap), so E[N] = Σ F_n and
    E[N²] = Σ (2n − 1) F_n. With the tagged arrival at U·x, others = N_back(U·x) + N_fwd((1 − U)·x);
    its mean and variance over U minus x (the Poisson value of both) are the excesses. Bursty
    arrivals (c_a² > 1) cluster around the tagged one: both are positive, tending to c_a² − 1 and
    (c_a² − 1)·x-like for long windows; smooth ones (c_a² < 1) give negative excesses.
    """
    from scipy.special import gammainc

    k = 1.0 / max(scv, 0.02)  # evenly spaced arrivals (c_a² → 0) are tabulated at c_a² = 0.02
    u = (np.arange(48) + 0.5) / 48
    n = np.arange(1, 400)[:, None]
    t = (PALM_AXIS[:, None] * u[None, :]).ravel()
    F = gammainc(n * k, k * t[None, :])
    h = F.sum(axis=0).reshape(len(PALM_AXIS), len(u))
    m2 = ((2 * n - 1) * F).sum(axis=0).reshape(h.shape)
    hb, m2b = h[:, ::-1], m2[:, ::-1]
    mean = (h + hb).mean(axis=1)
    second = (m2 + m2b + 2.0 * h * hb).mean(axis=1)
    return mean - PALM_AXIS, second - mean**2 - PALM_AXIS


def palm_excess(scv, x):
    """Extra mean and variance (beyond Poisson's x) of the arrivals sharing a tagged request's
    cycle, x = λ·E[C*] expected (``_palm_table``); beyond the table the variance excess grows ∝ x.
    ``scv`` may be an array broadcasting with ``x`` (one table per distinct value; 0 excess at 1)."""
    ax = np.log(PALM_AXIS)
    x = np.asarray(x, dtype=float)
    scv, lx = np.broadcast_arrays(np.asarray(scv, dtype=float), np.log(np.clip(x, PALM_AXIS[0], PALM_AXIS[-1])))
    scale = np.broadcast_to(np.maximum(x / PALM_AXIS[-1], 1.0), lx.shape)
    e_n, v_n = np.zeros(lx.shape), np.zeros(lx.shape)
    for c in np.unique(scv):
        if c != 1.0:
            sel = scv == c
            e_t, v_t = _palm_table(float(c))
            e_n[sel], v_n[sel] = np.interp(lx[sel], ax, e_t), np.interp(lx[sel], ax, v_t) * scale[sel]
    return e_n, v_n


def decode_batch(batch, L, stats: WorkloadStats):
    """Sequences past their first token at mean occupancy ``batch``: D = B·(1 − L/OSL).

    ``request_rate`` counts every admitted request for OSL/L iterations; in the first of them, the
    iteration that prefills its prompt and gives its first token, it does not decode, so B·L/OSL
    of the B are in their prefill iteration and D decode (Little's law on the decode phase,
    D = λ·(OSL/L − 1)·E[iteration]; des.simulate_engine's ``decode_batch``)."""
    return np.asarray(batch, dtype=float) * np.maximum(1.0 - L / stats.osl_mean, 0.0)


def tpot_spread(plan: Plan, q: float) -> float:
    """Multiplier on a q-quantile of per-request TPOT from requests that accept drafts at different
    rates: a request's mean tokens per step L_i is lognormal with mean L and log-sd s
    (``plan.serving.tokens_per_step_log_sd``), its TPOT ∝ 1/L_i, so TPOT's q-quantile is
    exp(s²/2 + z_q·s) times the one at L (1 without speculative decoding). A request's own
    step-to-step acceptance noise averages out over its hundreds of steps; what is left is what
    it asks for (reasoning text drafts better than code, say)."""
    s = plan.serving.tokens_per_step_log_sd
    if s <= 0.0:
        return 1.0
    return float(np.exp(0.5 * s * s + NormalDist().inv_cdf(q) * s))


def request_rate(batch, t_d, s_mean, L, stats: WorkloadStats):
    """Requests/s at mean occupancy ``batch`` (Little's law on the decode side): each stays for
    OSL/L decode iterations of ``t_d`` and every one of the ``batch`` adds its prefill ``s_mean``
    to the cycle, λ = B / (OSL·t_d/L + B·S)."""
    return batch / (stats.osl_mean * t_d / L + batch * s_mean)


def queue_metrics(t_d, s_mean, s_sq, batch, L, stats: WorkloadStats, q: float, cost: StepCost,
                  slope=0.0) -> ServingResult:
    """Closed-form server metrics from the decode step time and prefill service moments.

    Arrivals: a renewal process with c_a² = ``stats.arrival_scv`` (1 = Poisson, where every
    correction below vanishes). The requests admitted with a cycle are those that arrived during
    the previous one; their count has variance c_a²·λ·E[C] (the index of dispersion of a renewal
    process), so the cycle's variance takes E[S²] + (c_a² − 1)·E[S]² per arrival in place of E[S²],
    and a tagged request's own cycle holds the ``palm_excess`` extra requests (bursty arrivals come
    together). Checked against ``des.simulate`` with gamma gaps in tests/test_queueing.py.
    """
    ca2 = stats.arrival_scv
    rate = request_rate(batch, t_d, s_mean, L, stats)
    rho = rate * s_mean
    c_mean = t_d / (1.0 - rho)
    s_sq_count = s_sq if ca2 == 1.0 else s_sq + (ca2 - 1.0) * s_mean * s_mean
    c_var = rate * c_mean * s_sq_count / (1.0 - rho * rho)
    c_sq = c_var + c_mean**2
    # gamma moments of the cycle for the third moment of the residual
    k = c_mean**2 / np.maximum(c_var, 1e-30 * c_mean**2)
    theta = c_mean / k
    c_cube = theta**3 * k * (k + 1) * (k + 2)
    # TTFT. Busy engine (probability 1 − e^(−B)): the request lands in a length-biased cycle C* at
    # a uniform point U, so TTFT = (1 − U)·C* + t_d + S_0 + Σ S_j over the Poisson(λ·C*) others
    # that arrived in the same cycle; given C* the parts are independent, and the variance keeps
    # the shared-C* terms (residual × next cycle covariance and Var C*). Idle engine: t_d + S_0.
    c_star = c_sq / c_mean
    c_star_var = np.maximum(c_cube / c_mean - c_star**2, 0.0)
    s_var = np.maximum(s_sq - s_mean**2, 0.0)
    idle = np.exp(-np.asarray(batch, dtype=float))
    busy = 1.0 - idle
    b_mean = 0.5 * c_star + t_d + s_mean + rho * c_star
    b_var = c_cube / c_mean / 12.0 + s_var + rate * s_sq * c_star + (0.5 + rho) ** 2 * c_star_var
    if ca2 != 1.0:
        e_n, v_n = palm_excess(ca2, rate * c_star)
        b_mean = b_mean + e_n * s_mean
        b_var = b_var + e_n * s_var + v_n * s_mean * s_mean
    i_mean = t_d + s_mean
    ttft_mean = busy * b_mean + idle * i_mean
    ttft_p99 = _two_gamma_quantile(busy, b_mean, b_var, idle, i_mean, s_var, q)
    tpot_mean = c_mean / L
    n = np.maximum(stats.osl_points / L - 1.0, 1.0)  # cycles after the first token
    # σ_j = A/√n_j with A common to the grid point, so the mixture quantile is μ + A·z*
    amplitude = np.sqrt(np.maximum(c_var, 0.0) * (1 + rho) / (1 - rho)) / L
    fast = amplitude * mixture_z(np.sqrt(n), stats.osl_probs, q)
    # the decode count's drift over a request's window (decode_drift), per iteration of the cycle
    a_s, z_s, sd99 = decode_drift(slope / (1.0 - rho), batch, t_d, L, stats, q, rho)
    tpot_p99 = tpot_mean + np.sqrt(fast * fast + (a_s * z_s) ** 2)
    # e2e: the TTFT tail plus the longest requests' cycles with their own fluctuation
    n99 = stats.osl_p99 / L
    e2e = ttft_p99 + n99 * c_mean + NormalDist().inv_cdf(q) * np.sqrt(
        n99 * np.maximum(c_var, 0.0) * (1 + rho) / (1 - rho) + (n99 * sd99) ** 2)
    return ServingResult(tokens_per_s=rate * stats.osl_mean, rate=rate, ttft_mean=ttft_mean, ttft_p99=ttft_p99,
                         tpot_mean=tpot_mean, tpot_p99=tpot_p99, e2e_p99=e2e, step=cost, prefill_share=rho)


def _lognormal_mixture_quantile(weights, p50s, pqs, q: float, q_fit: float, iters: int = 48):
    """q-quantile of Σ w_i·LogNormal_i, each LogNormal through its median and its q_fit-quantile
    (arrays broadcast; bisection in log x; an infinite component quantile gives infinity)."""
    z_fit = NormalDist().inv_cdf(q_fit)
    mus = [np.log(np.maximum(m, 1e-300)) for m in p50s]
    sigmas = [np.maximum(np.log(np.maximum(p, 1e-300)) - mu, 1e-9) / z_fit for p, mu in zip(pqs, mus)]
    finite = np.all([np.isfinite(p) for p in pqs], axis=0)
    lo = np.min([np.where(np.isfinite(m), m, 0.0) for m in mus], axis=0) - 10.0
    hi = np.max([np.where(np.isfinite(mu + 6 * sg), mu + 6 * sg, 0.0) for mu, sg in zip(mus, sigmas)], axis=0) + 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        cdf = sum(w * _norm_cdf((mid - mu) / sg) for w, mu, sg in zip(weights, mus, sigmas))
        lo, hi = np.where(cdf < q, mid, lo), np.where(cdf < q, hi, mid)
    return np.where(finite, np.exp(0.5 * (lo + hi)), np.inf)


def mix_rate_states(base, states, shares, q: float):
    """One result for arrivals switching slowly between rates, from per-state results (quasi-static:
    each state's queue in its own steady state, ``scheduler.rate_states_mix``). Rates and shares of time average over time; request-level latencies mix
    over the requests, state i holding a share π_i·λ_i/Σπ_j·λ_j of them; p-quantiles from
    log-normals through each state's median and p-quantile. ``base`` (the mean-occupancy result)
    keeps the step costed for ``explain``; its fields are replaced in place and it is returned."""
    rates = [np.where(np.isfinite(r.rate) & (r.prefill_share < 1), r.rate, 0.0) for r in states]
    total = sum(w * r for w, r in zip(shares, rates))
    req = [w * r / np.maximum(total, 1e-300) for w, r in zip(shares, rates)]
    base.rate = total
    base.tokens_per_s = sum(w * r.tokens_per_s for w, r in zip(shares, states))
    for r in states:  # a saturated state has no steady state: its latencies are unbounded
        bad = ~(np.isfinite(r.rate) & (r.prefill_share < 1))
        if np.any(bad):
            r.ttft_p99, r.tpot_p99, r.e2e_p99 = (np.where(bad, np.inf, x) for x in (r.ttft_p99, r.tpot_p99, r.e2e_p99))
    base.prefill_share = sum(w * r.prefill_share for w, r in zip(shares, states))
    base.ttft_mean = sum(v * r.ttft_mean for v, r in zip(req, states))
    base.tpot_mean = sum(v * r.tpot_mean for v, r in zip(req, states))
    p50 = lambda r, name: getattr(r, name, None) if getattr(r, name, None) is not None else r.ttft_mean  # noqa: E731
    base.ttft_p99 = _lognormal_mixture_quantile(req, [p50(r, "ttft_p50") for r in states], [r.ttft_p99 for r in states], q, q)
    base.tpot_p99 = _lognormal_mixture_quantile(req, [r.tpot_mean for r in states], [r.tpot_p99 for r in states], q, q)
    if getattr(base, "ttft_p50", None) is not None:
        base.ttft_p50 = _lognormal_mixture_quantile(req, [p50(r, "ttft_p50") for r in states],
                                                    [r.ttft_p99 for r in states], 0.5, q)
        base.tpot_p50 = base.tpot_mean
    base.e2e_p99 = _lognormal_mixture_quantile(req, [p50(r, "ttft_p50") + r.e2e_p99 - r.ttft_p99 for r in states],
                                               [r.e2e_p99 for r in states], q, q)
    return base
