"""Iteration-level model of a serving engine with d attention ranks (closed form, over the grid).

The engine (TensorRT-LLM PyTorch executor with attention data parallelism; vLLM/SGLang and dense
models are the case d = 1 with no gate) runs iterations back to back. In every iteration each of
the d attention ranks advances its running sequences by one decode step; the ranks synchronise at
every MoE layer, so an iteration lasts as long as its busiest rank. Prompts are admitted only at
*context iterations*: with the attention-DP admission gate on (``plan.engine.gate_timeout_iters``
> 0, d > 1), a rank's waiting prompts are held until every rank has one (then ``gate_wait_iters``
more iterations) or until the gate times out; with the gate off every iteration admits. A context
iteration is a decode iteration stretched by the prefill of the prompts it admits (stalling every
sequence's decode), set by the rank holding the most prompt tokens.

Per grid point (mean occupancy B per instance, layout, plan):

- decode iteration t_d: ``step_cost`` with every rank padded to the captured CUDA-graph size of the
  busiest rank (per-rank occupancy Poisson(B/d), the M/G/inf occupancy; eager above the largest
  captured size), KV reads of the B real sequences. B counts a request from its admitting
  iteration, in which it prefills and does not decode: the engine decodes only
  ``serving.decode_batch`` = B·(1 − L/OSL) (des.simulate_engine does), so t_d is priced B·L/OSL
  rows high (tests/test_scheduler.py: the 6/2 chunked 90 % gap);
- gate period G (iterations between context iterations): per-rank arrivals per iteration
  a = B·L/(OSL·d) (Little's law on the decode side), P(every rank has a prompt after k iterations)
  = (1 − e^(−a·k))^d, the timeout T, the extra wait W, and immediate admission when some rank has
  no running sequence (probability 1 − (1 − e^(−B/d))^d);
- prompt tokens of the busiest rank per context iteration: the maximum of d independent compound
  Poisson sums over the ISL distribution (exact distribution by FFT below 48 expected prompts per
  rank, normal above), giving the rank-imbalance factor of the prefill cost; under the balanced
  router (``plan.Engine.rank_router``) a rank's Poisson count of prompts with one prompt's length
  deviation, the router steering the others' away (``busiest_tokens``);
- the period C = G·t_d + X (X the stall), its mean and variance by the compound-Poisson recursion,
  the arrival rate from Little's law, TTFT and TPOT means and p-quantiles (``serving`` machinery);
- token budget (``max_num_tokens`` per rank): a rank takes at most its free budget c (budget less
  its decode tokens) of prompt tokens per context iteration and carries the rest (a chunked prompt
  goes on in the next iterations; a whole one waits until it fits): the busiest rank's tokens are
  the largest of d capped sums, the offered count raised until the capped sum carries the
  arrivals (``capped_tokens``); the carried backlog (mean from the Lindley recursion's second
  moment with a zero-or-exponential backlog at the Cramér-Lundberg rate, ``_lindley_backlog``;
  exponential given positive) and the prompt's own ceil(tokens / c) iterations add K context
  iterations to TTFT (``budget_wait``, each at a full budget, but a chunked prompt's last one at
  its rest unless a backlog queues behind it); whole prompts (non-chunked) leave the budget's last
  gap, E[ISL²]/(2·E[ISL]) tokens, unused while a rank carries a backlog; carried prompts open the
  ADP gate sooner; gated, a chunked rank also finishes the prompt it started between admissions;
- gated chunked prefill (as des.simulate_engine runs it: a started prompt goes on every iteration,
  new prompts only at context iterations): a context iteration takes at most the free budget c on
  a rank and the straddling prompt's rest (forward recurrence of the ISL) stalls the next
  iteration(s) by the largest rest over the ranks (``rest_max``), seen by the gate's checks from
  the second one on; a rank drains c plus one rest per period; the gate period and the carried
  prompts are one fixed point (bisected); a backlogged rank's periods are those of a gate waiting
  for the other d − 1 ranks, shorter by decode iterations, not by stalls; a prompt waits the
  periods until the tokens ahead of it plus the straddler's overshoot fit, and a straddler one
  iteration more; the queue is stable only below c plus one rest per W + 1 iterations;
- TTFT quantiles: gated, the wait for the next context iteration is uniform over the
  timeout-bounded period (``_uniform_gamma_quantiles``), else gamma-shaped;
- limits: mean per-rank occupancy within ``max_batch_size`` and the chance a rank is full at most
  1 − q (else ``Reason.BATCH_LIMIT``); with non-chunked prefill the longest prompt plus the rank's
  decode tokens must fit ``max_num_tokens``, and prompt tokens must arrive slower than one free
  budget per iteration (else ``Reason.TOKEN_BUDGET``).

With the gate off, d = 1, no token budget and every size captured this is exactly
``serving.server`` (tests/test_scheduler.py). Validated against ``des.simulate_engine``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass, replace
from functools import lru_cache

import numpy as np

from . import table_cache
from .engine import StepCost, step_cost
from .errors import Reason, require
from .graph import Layout, Shape
from .plan import Plan, admission_period
from .serving import (DRIFT_STEP, ServingResult, WorkloadStats, _norm_cdf, _prefill, _two_gamma_quantiles, decode_drift,
                      gamma_cdf,
                      gamma_cdf_at, gamma_cdf_terms,
                      mix_rate_states, mixture_z, newton_or_bisect, palm_excess, prefix_hit, request_rate,
                      tpot_spread)
from .serving import offline as serving_offline
from statistics import NormalDist

FFT_MAX_COUNT = 48.0
"""Expected prompts per rank per context iteration above which the busiest rank's prompt tokens
use the normal approximation of each rank's compound Poisson sum."""


@dataclass
class EngineResult(ServingResult):
    """``ServingResult`` plus the scheduler's own figures (per instance, arrays)."""

    iteration_s: np.ndarray | None = None
    """Mean iteration time (decode and context iterations together)."""
    decode_iteration_s: np.ndarray | None = None
    gate_iters: np.ndarray | None = None
    """Mean iterations between context iterations."""
    busiest_prompt_tokens: np.ndarray | None = None
    """Mean prompt tokens of the busiest rank in a context iteration."""
    decode_rows: np.ndarray | None = None
    """Expected decode rows per rank (busiest rank padded to its captured graph size)."""
    decode_slope: np.ndarray | None = None
    """The decode iteration's slope dt_d/dB (seconds per sequence of occupancy) that the decode
    count's drift (``serving.decode_drift``) prices the TPOT tail with."""
    ttft_p50: np.ndarray | None = None
    tpot_p50: np.ndarray | None = None
    ok: np.ndarray | None = None
    reason: np.ndarray | None = None


# ---- busiest rank's prompt tokens ----------------------------------------------------------------

def _max_normal_moments(d: int, n: int = 4001) -> tuple[float, float]:
    """Mean and variance of the largest of d independent standard normals (numerical)."""
    z = np.linspace(-8, 8, n)
    cdf = NormalDist().cdf
    F = np.array([cdf(v) for v in z]) ** d
    pdf = np.gradient(F, z)
    m = float(np.trapezoid(z * pdf, z))
    return m, float(np.trapezoid(z * z * pdf, z)) - m * m


def _length_lattice(x: np.ndarray, p: np.ndarray, top: float):
    """The prompt lengths x (probabilities p) on a token lattice of width w = max(1, max x / 256),
    long enough (a power of two, n points) for sums up to ``top`` tokens: (w, n, φ = FFT of the pmf)."""
    w = max(1.0, float(x.max()) / 256.0)
    n = int(2 ** np.ceil(np.log2(top / w + 2)))
    pmf = np.bincount(np.round(x / w).astype(int), weights=p, minlength=n)[:n]
    return w, n, np.fft.rfft(pmf)


def _lattice_cdf(pmf: np.ndarray) -> np.ndarray:
    """CDF rows of pmf rows from an inverse FFT (round-off negatives dropped, each row ending at 1)."""
    c = np.clip(np.cumsum(np.maximum(pmf, 0.0), axis=-1), 0.0, 1.0)
    return c / c[:, -1:]


def _lattice_max_moments(cdf: np.ndarray, grid: np.ndarray, w: tuple, d: int):
    """E[max], Var[max] of d independent variables, each with one of the CDF rows on ``grid``
    (``_tail_integrals``' widths w)."""
    i1, i2 = _tail_integrals(1.0 - cdf**d, grid, w)
    e = i1[:, -1]
    return e, i2[:, -1] - e * e


def _cp_rows(x: np.ndarray, p: np.ndarray, ms: np.ndarray):
    """Compound Poisson(m) sums of lengths x (probabilities p) on a token lattice of width w, for
    each m of ``ms`` (at most ``FFT_MAX_COUNT``): (lattice, w, cdf rows). pmf = exp(m(φ − 1)) by FFT."""
    mu, m2 = float(np.sum(p * x)), float(np.sum(p * x * x))
    w, n, phi = _length_lattice(x, p, FFT_MAX_COUNT * mu + 14.0 * np.sqrt(FFT_MAX_COUNT * m2) + x.max())
    cdf = np.empty((len(ms), n))
    for rows in np.array_split(np.arange(len(ms)), max(1, len(ms) // 16)):  # blocks of counts: one FFT call each
        cdf[rows] = _lattice_cdf(np.fft.irfft(np.exp(ms[rows, None] * (phi[None, :] - 1.0)), n, axis=-1))
    return np.arange(n) * w, w, cdf


COUNT_AXIS = np.geomspace(1e-3, 1e4, 141)
"""Expected prompts per rank per context iteration at which the busiest rank's tokens are tabulated."""


def _isl_law(isl_points, isl_probs):
    """The prompt lengths as arrays (x, p normalized) and their first two moments E[ISL], E[ISL²]."""
    x = np.asarray(isl_points, dtype=float)
    p = np.asarray(isl_probs, dtype=float)
    p = p / p.sum()
    return x, p, float(np.sum(p * x)), float(np.sum(p * x * x))


@lru_cache(maxsize=16)
def _cp_table(isl_points: tuple, isl_probs: tuple):
    """``_cp_rows`` over the lattice part of ``COUNT_AXIS`` (shared by every d), with E[ISL], E[ISL²]."""
    x, p, mu, m2 = _isl_law(isl_points, isl_probs)
    grid, w, cdf = _cp_rows(x, p, COUNT_AXIS[COUNT_AXIS <= FFT_MAX_COUNT])
    # the tables integrate the cdf's tail: every ``stride``-th lattice point is enough
    stride = max(1, grid.size // LATTICE_POINTS)
    return grid[::stride], (w * stride, w), np.ascontiguousarray(cdf[:, ::stride]), mu, m2


LATTICE_POINTS = 8192
"""Lattice points (at least) over which the tables integrate a compound Poisson sum's tail."""


def _tail_integrals(tail: np.ndarray, grid: np.ndarray, w: tuple):
    """E[min(Y, c)] and E[min(Y, c)²] at every lattice point c (rows; a leading 0) of a variable Y on
    the fine lattice of width w[1] from ``tail`` = P(Y > y) sampled every w[0]: the lattice sums
    Σ_j w·P(Y > j·w) and Σ_j (2j + 1)·w²·P(Y > j·w) as trapezoids over the samples, plus the fine
    lattice's half-step corrections (w/2·P(Y > 0) and w·E[min(Y, c)])."""
    step, fine = w
    z = np.zeros((tail.shape[0], 1))
    t1 = np.cumsum(0.5 * (tail[:, 1:] + tail[:, :-1]) * step, axis=-1)
    t2 = np.cumsum((grid[1:] * tail[:, 1:] + grid[:-1] * tail[:, :-1]) * step, axis=-1)
    e1 = np.concatenate([z, t1 + 0.5 * fine * tail[:, :1]], axis=-1)
    return e1, np.concatenate([z, t2], axis=-1) + fine * e1


@lru_cache(maxsize=64)
def _busiest_table(isl_points: tuple, isl_probs: tuple, d: int):
    """(log m grid, E[max], Var[max]) of the largest of d compound Poisson(m) sums of prompt lengths
    (kept on disk between processes, ``table_cache``)."""
    return table_cache.persisted("busiest", _build_busiest_table, isl_points, isl_probs, int(d))


def _build_busiest_table(isl_points: tuple, isl_probs: tuple, d: int):
    grid, w, cdf, mu, m2 = _cp_table(isl_points, isl_probs)
    ms = COUNT_AXIS
    emax, vmax = np.empty_like(ms), np.empty_like(ms)
    en, vn = _max_normal_moments(d)
    small = ms <= FFT_MAX_COUNT
    big = ~small
    emax[big] = ms[big] * mu + np.sqrt(ms[big] * m2) * en
    vmax[big] = ms[big] * m2 * vn
    emax[small], vmax[small] = _lattice_max_moments(cdf, grid, w, d)
    return np.log(ms), emax, np.maximum(vmax, 0.0), mu, m2


@lru_cache(maxsize=64)
def _balanced_table(isl_points: tuple, isl_probs: tuple, d: int):
    """``_busiest_table`` under the balanced rank router: (log m grid, E[max], Var[max]) of the
    largest of d ranks' prompt tokens, a rank with N ~ Poisson(m) prompts holding (N − 1) mean-length
    prompts and one of random length (``busiest_tokens``; kept on disk, ``table_cache``)."""
    return table_cache.persisted("busiest-balanced", _build_balanced_table, isl_points, isl_probs, int(d))


def _build_balanced_table(isl_points: tuple, isl_probs: tuple, d: int):
    x, p, mu, m2 = _isl_law(isl_points, isl_probs)
    var_x = m2 - mu * mu
    n_max = int(np.ceil(FFT_MAX_COUNT + 14.0 * np.sqrt(FFT_MAX_COUNT) + 2))
    w, size, phi = _length_lattice(x, p, n_max * mu + x.max())
    ms = COUNT_AXIS
    small = ms <= FFT_MAX_COUNT
    emax, vmax = np.empty_like(ms), np.empty_like(ms)
    # many prompts: N·μ + (ISL − μ), normal, the largest of d by their order statistics
    en, vn = _max_normal_moments(d)
    sd = np.sqrt(ms[~small] * mu * mu + var_x)
    emax[~small] = ms[~small] * mu + sd * en
    vmax[~small] = sd * sd * vn
    # few: on the lattice, (N − 1)·μ (mass P(N = n) at (n − 1)·μ) convolved with one length, plus N = 0
    n = np.arange(1, n_max + 1)
    shift = np.round((n - 1) * mu / w).astype(int)
    log_pois = n[None, :] * np.log(ms[small, None]) - ms[small, None] - np.cumsum(np.log(n))[None, :]
    lattice = np.zeros((int(small.sum()), size))
    np.add.at(lattice, (slice(None), shift), np.exp(log_pois))
    pmf = np.fft.irfft(np.fft.rfft(lattice, axis=-1) * phi[None, :], size, axis=-1)
    pmf[:, 0] += np.exp(-ms[small])  # no prompt: nothing on the rank
    emax[small], vmax[small] = _lattice_max_moments(_lattice_cdf(pmf), np.arange(size) * w, (w, w), d)
    return np.log(ms), emax, np.maximum(vmax, 0.0), mu, m2


CAP_AXIS = np.geomspace(1.0, 1e7, 141)
"""Prompt tokens a rank can take per context iteration (its free token budget) at which the
capped busiest-rank tokens are tabulated."""


def _lattice_caps(grid, w, cdf, tail):
    """E[min(Y, c)] and E[min(Y, c)²] at every capacity of ``CAP_AXIS`` (rows of a lattice tail)."""
    xi = np.clip(CAP_AXIS / w[0], 0.0, grid.size - 1.0)
    i0 = np.minimum(xi.astype(int), grid.size - 2)
    f = xi - i0
    return [acc[:, i0] * (1.0 - f) + acc[:, i0 + 1] * f for acc in _tail_integrals(tail, grid, w)]


def _normal_caps(mean, sd, d: int):
    """E[min(Y, c)], E[min(Y, c)²] (Y the largest of d normals, rows) and P(one > c) at every
    capacity of ``CAP_AXIS``: quadrature of the tails over [0, c] (1 below mean − 10 sd)."""
    cs = CAP_AXIS
    lo = np.clip(mean - 10.0 * sd, 0.0, cs[None, :])
    hi = np.clip(mean + 10.0 * sd, lo, cs[None, :])
    u = np.linspace(0.0, 1.0, 65)
    y = lo[..., None] + (hi - lo)[..., None] * u
    f = _norm_cdf((y - mean[..., None]) / sd[..., None])
    tail = 1.0 - (np.power(f, d) if d > 1 else f)
    span = hi - lo
    return (lo + span * np.trapezoid(tail, u, axis=-1), lo * lo + span * np.trapezoid(2.0 * y * tail, u, axis=-1),
            1.0 - _norm_cdf((cs[None, :] - mean) / sd))


@lru_cache(maxsize=16)
def _rank_queue_table(isl_points: tuple, isl_probs: tuple):
    """One rank's queue per (log m, log c) of ``COUNT_AXIS`` × ``CAP_AXIS`` (d-independent part of
    ``_capped_table``): log m' with E[min(A(m'), c)] = m·E[ISL] (∞ where m·E[ISL] ≥ c), P(A(m') > c)
    and the log of the mean carried backlog over Kingman's m·E[ISL²]/(2(c − m·E[ISL])) (0 where
    unstable; ``capped_tokens`` multiplies it back)."""
    grid, w, cdf, mu, m2 = _cp_table(isl_points, isl_probs)
    ms, cs = COUNT_AXIS, CAP_AXIS
    small = ms <= FFT_MAX_COUNT
    k1, over = np.empty((len(ms), len(cs))), np.empty((len(ms), len(cs)))
    k1[small] = _lattice_caps(grid, w, cdf, 1.0 - cdf)[0]
    xi = np.clip(cs / w[0], 0.0, grid.size - 1.0)
    i0 = np.minimum(xi.astype(int), grid.size - 2)
    over[small] = 1.0 - (cdf[:, i0] * (1.0 - (xi - i0)) + cdf[:, i0 + 1] * (xi - i0))
    mb = ms[~small, None]
    k1[~small], _, over[~small] = _normal_caps(mb * mu, np.sqrt(mb * m2), 1)
    k1 = np.maximum.accumulate(k1, axis=0)
    lm = np.log(ms)
    lm_eff, pov = np.empty_like(k1), np.empty_like(k1)
    for jc in range(len(cs)):  # m' per column: invert E[min(A(m'), c)] = m·E[ISL] along m
        col = k1[:, jc]
        target = ms * mu
        lm_eff[:, jc] = np.where(target < col[-1] * (1.0 - 1e-9), np.interp(target, col, lm), np.inf)
        le = np.minimum(lm_eff[:, jc], lm[-1])  # beyond the axis the rank is full
        pov[:, jc] = np.interp(le, lm, over[:, jc])
    back = _lindley_backlog(*_isl_law(isl_points, isl_probs)[:2], mu, m2, grid, cdf, ms, cs)
    # tabulated relative to Kingman's m·E[ISL²]/(2(c − m·E[ISL])), which carries the pole at
    # m·E[ISL] = c (interpolating the backlog itself across it overstated it 1.3-2.6 × at load 0.9-0.95)
    ea = ms[:, None] * mu
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(ea < cs[None, :], back * 2.0 * (cs[None, :] - ea) / (ms[:, None] * m2), 1.0)
    return lm_eff, np.clip(pov, 0.0, 1.0), np.log(np.clip(ratio, 1e-30, 1.0))


BACKLOG_POINTS = 1024
"""Lattice points (at most) over which a rank's prompt tokens per iteration are summed for its
carried backlog (``_lindley_backlog``)."""

NEWTON_STEPS = 12


def _cramer_lundberg(x, p, mu, m2, m, c):
    """θ > 0 with m·(E[e^(θ·ISL)] − 1) = θ·c (arrays m, scalar c, m·E[ISL] < c): safeguarded Newton
    steps on g(θ) = log(m·(E[e^(θ·ISL)] − 1)/(θ·c)), nearly linear where e^(θ·ISL) dominates, inside
    the bracket (0, the diffusion root 2(c − mμ)/(m·E[ISL²])], bisected in log θ when a step leaves
    it; capped at θ·max ISL = 600. ``mu``, ``m2``: E[ISL], E[ISL²] of (x, p)."""
    hi = np.minimum(2.0 * (c - m * mu) / (m * m2), 600.0 / float(x.max()))
    lo = np.zeros_like(hi)
    th = hi.copy()
    for _ in range(NEWTON_STEPS):
        e = np.exp(th[:, None] * x[None, :])
        phi1 = np.maximum(e @ p - 1.0, 1e-300)
        g = np.log(m * phi1 / (th * c))
        gp = ((e * x[None, :]) @ p) / phi1 - 1.0 / th
        lo, hi = np.where(g < 0, th, lo), np.where(g < 0, hi, th)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = th - g / gp
        # a point at its root stays (``newton_or_bisect``; 12 fixed steps had sent some there and back, 8 % off)
        th, stay = newton_or_bisect(th, step, lo, hi, np.where(lo > 0, np.sqrt(lo * hi), 0.5 * hi))
        if np.all(stay):  # every rate at its root: the remaining steps would keep it
            break
    return np.maximum(th, 1e-30)


def backlog_decay(stats: WorkloadStats, m, cap):
    """1/θ, prompt tokens: the length over which the tail of a rank's carried backlog falls by e when
    ``m`` prompts arrive per context iteration and it takes ``cap`` tokens each (the Cramér-Lundberg
    rate of ``_lindley_backlog``; ∞ where m·E[ISL] ≥ cap). Near saturation it is the backlog's
    conditional mean; at lower loads shorter, the backlog then mostly a prompt's rest."""
    x, p, mu, m2 = _isl_law(stats.isl_points, stats.isl_probs)
    m, c = (np.array(a, dtype=float) for a in np.broadcast_arrays(m, cap))
    out = np.full(m.shape, np.inf)
    ok = (m > 0) & (m * mu < c)
    if np.any(ok):
        out[ok] = 1.0 / _cramer_lundberg(x, p, mu, m2, m[ok], c[ok])
    return out


def backlog_feedback(decay, stats: WorkloadStats, p_over, q: float, m, cap, rate, slope, s_tok: float, dq: float,
                     prompt_scale: float, L: float):
    """How much longer a rank's carried backlog is (its mean and its tail length ``decay``,
    ``backlog_decay``) for the decoders it feeds.

    While a rank works off a backlog it prefills its whole budget every iteration, more than the
    arrivals' mean, and every prompt it finishes decodes for OSL/L iterations: after working off x
    tokens beyond the arrivals, x/E[ISL] more sequences decode. Each takes its decode tokens from
    the budget and lengthens the iteration by the decode slope less a budget token's prefill, so
    more arrive per iteration: the slack s₀ = c − m·E[ISL] falls by κ = dq + λ·(slope −
    s_tok·dq)·E[ISL] per such sequence. A diffusion with that drift has log P(W > x) = −θx·(1 −
    κx/(2·E[ISL]·s₀)): over the backlogs that set the q-quantile (x* = decay·ln(P(W > 0)/(1 − q)),
    at most the s₀·OSL/L worked off before the first of them finishes) the tail is longer by
    1/(1 − κx*/(2·E[ISL]·s₀)), the factor returned (at most 2); the backlog's mean is taken longer by
    as much. Des.simulate_engine, one rank, chunked 512-token budget at 90 % load (Llama-2 prompts,
    synthetic costs): the backlog's conditional mean 1,049 tokens against the Lindley queue's 972 at
    a fixed slack; 8 seeds × 48,000 requests."""
    mu = stats.isl_mean
    slack = np.maximum(cap - m * mu, 1e-9)
    kappa = np.maximum(dq / prompt_scale + rate * (slope - s_tok * dq) * mu, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.where(np.isfinite(decay), decay * np.log(np.maximum(p_over / (1.0 - q), np.e)), 0.0)
    x = np.minimum(x, slack * stats.osl_mean / L)
    return 1.0 / np.maximum(1.0 - kappa * x / (2.0 * mu * slack), 0.5)


def _lindley_backlog(x, p, mu, m2, grid, cdf, ms, cs):
    """Mean backlog E[W] of one rank's discrete-time prompt queue W' = (W + A − c)⁺ (A compound
    Poisson(m) prompt tokens, c the tokens it takes per context iteration) at every (m, c) of
    ``ms`` × ``cs`` (∞ where m·E[ISL] ≥ c).

    Squaring W' = W + A − c + U (U = (c − W − A)⁺ the budget left unused) gives the exact
    E[W] = (E[(A − c)²] − E[U²]) / (2(c − E[A])), E[U] = c − E[A]; what is not known is U's
    distribution. W is taken 0 with probability 1 − π and exponential of the Cramér-Lundberg
    rate θ (m·(E[e^(θ·ISL)] − 1) = θ·c, the exact decay of its tail) with probability π, π set by
    E[U] = c − E[A]; then E[U²] follows by summing over A's lattice. Against a Monte Carlo of
    the recursion (llama2-70b prompts, c = 464 / 1,000 / 1,796, loads 0.3-0.95) this is within
    5 %; the earlier closure (W + A taken as A at a raised count), read from the table, was within
    9 % up to load 0.8 but 1.3-2.7 × too large at 0.9-0.95 (tests/test_scheduler.py). ``mu``,
    ``m2``: E[ISL], E[ISL²] of (x, p), as ``_cp_table`` returns them."""
    small = ms <= FFT_MAX_COUNT
    # A's lattice per count: the compound Poisson rows (coarsened) and a normal above FFT_MAX_COUNT
    s2 = max(1, grid.size // BACKLOG_POINTS)
    g2, c2 = grid[::s2], cdf[:, ::s2]
    pts_s = np.concatenate([[0.0], 0.5 * (g2[1:] + g2[:-1])])
    pmf_s = np.diff(np.concatenate([np.zeros((c2.shape[0], 1)), c2], axis=-1), axis=-1)
    u = np.linspace(-8.0, 8.0, 257)
    mb = ms[~small, None]
    pts_b = np.maximum(mb * mu + np.sqrt(mb * m2) * u, 0.0)
    pmf_b = np.broadcast_to(np.exp(-0.5 * u * u) / np.sum(np.exp(-0.5 * u * u)), pts_b.shape)
    ea = ms * mu
    back = np.full((len(ms), len(cs)), np.inf)
    for jc, c in enumerate(cs):
        ok = ea < c
        if not np.any(ok):
            continue
        m = ms[ok]
        th = _cramer_lundberg(x, p, mu, m2, m, c)
        out = np.empty(len(m))
        for sel, pts, pmf in ((small[ok], pts_s, pmf_s[ok[small]]), (~small[ok], pts_b[ok[~small]], pmf_b[ok[~small]])):
            if not np.any(sel):
                continue
            t = th[sel, None]
            y = np.maximum(c - pts, 0.0)
            e = np.where(y > 0, -np.expm1(-t * y), 0.0)  # 1 − e^(−θy) where A < c
            u0, u02 = np.sum(pmf * y, axis=-1), np.sum(pmf * y * y, axis=-1)
            u1 = u0 - np.sum(pmf * e, axis=-1) / t[:, 0]                       # E[(c − A − W)⁺], W ~ exp(θ)
            u12 = u02 - 2.0 * u0 / t[:, 0] + 2.0 * np.sum(pmf * e, axis=-1) / t[:, 0] ** 2  # its square
            mm = m[sel]
            slack = c - mm * mu
            pi = np.clip((u0 - slack) / np.maximum(u0 - u1, 1e-300), 0.0, 1.0)
            eu2 = (1.0 - pi) * u02 + pi * u12
            out[sel] = (mm * m2 + slack * slack - eu2) / (2.0 * slack)
        back[ok, jc] = np.maximum(out, 0.0)
    return back


@lru_cache(maxsize=64)
def _capped_table(isl_points: tuple, isl_probs: tuple, d: int):
    """``_build_capped_table``, kept on disk between processes (``table_cache``)."""
    return table_cache.persisted("capped", _build_capped_table, isl_points, isl_probs, int(d))


def _build_capped_table(isl_points: tuple, isl_probs: tuple, d: int):
    """A rank takes at most c prompt tokens per context iteration (its budget left beside its decode
    tokens); the rest waits for the next one. Per (log m, log c) of ``COUNT_AXIS`` × ``CAP_AXIS``:

    - m': the offered count whose capped sum carries the arrivals, E[min(A(m'), c)] = m·E[ISL]
      (A(m) a rank's compound Poisson prompt tokens): the tokens a rank holds at a context
      iteration, its new prompts plus the backlog carried from earlier ones, taken as A(m'),
      so that what the ranks take per iteration equals what arrives (∞ where m·E[ISL] ≥ c);
    - E[Y], E[Y²] of Y = max over d ranks of min(A(m'), c), the busiest rank's tokens taken;
    - P(A(m') > c): the chance a rank carries a backlog into the next context iteration, and the
      mean backlog (``_rank_queue_table``).
    """
    grid, w, cdf, mu, m2 = _cp_table(isl_points, isl_probs)
    lm_eff, pov, lback = _rank_queue_table(isl_points, isl_probs)
    ms = COUNT_AXIS
    small = ms <= FFT_MAX_COUNT
    kd, kd2 = np.empty_like(lm_eff), np.empty_like(lm_eff)
    kd[small], kd2[small] = _lattice_caps(grid, w, cdf, 1.0 - cdf**d if d > 1 else 1.0 - cdf)
    mb = ms[~small, None]
    kd[~small], kd2[~small], _ = _normal_caps(mb * mu, np.sqrt(mb * m2), d)
    lm = np.log(ms)
    ey, ey2 = np.empty_like(kd), np.empty_like(kd)
    for jc in range(len(CAP_AXIS)):  # the busiest rank's capped tokens at m'
        le = np.minimum(lm_eff[:, jc], lm[-1])
        ey[:, jc] = np.interp(le, lm, kd[:, jc])
        ey2[:, jc] = np.interp(le, lm, kd2[:, jc])
    return lm, np.log(CAP_AXIS), np.stack([ey, ey2, pov, lback])


def _bilinear(tables, lx, ly, x, y):
    """Stacked tables (..., len(lx), len(ly)) on (lx, ly) at points (x, y) (log coordinates,
    clamped to the axes): one array per leading index."""
    x = np.clip(x, lx[0], lx[-1])
    y = np.clip(y, ly[0], ly[-1])
    i = np.clip(np.searchsorted(lx, x) - 1, 0, len(lx) - 2)
    j = np.clip(np.searchsorted(ly, y) - 1, 0, len(ly) - 2)
    fx = (x - lx[i]) / (lx[i + 1] - lx[i])
    fy = (y - ly[j]) / (ly[j + 1] - ly[j])
    return ((1 - fx) * (1 - fy) * tables[:, i, j] + fx * (1 - fy) * tables[:, i + 1, j]
            + (1 - fx) * fy * tables[:, i, j + 1] + fx * fy * tables[:, i + 1, j + 1])


def capped_tokens(stats: WorkloadStats, count, cap, d, router: str = "random", restoring=None):
    """The busiest rank's prompt tokens per context iteration when a rank takes at most ``cap``
    ISL tokens (``_capped_table``): (E[Y], Var[Y], P(a rank carries a backlog), mean backlog in
    ISL tokens, stable). ``count``: expected new prompts per rank per context iteration;
    ``router``: ``Engine.rank_router`` (its arrivals' dispersion sets the backlog, ``rank_backlog``);
    ``restoring``: the balanced router's pull per period (``rank_backlog``). A sixth value: the
    backlog's squared coefficient of variation (1, the exponential's, but where that pull bounds it)."""
    count, cap, d = np.broadcast_arrays(np.asarray(count, dtype=float), np.asarray(cap, dtype=float), np.asarray(d))
    ey, vy, pov, back = (np.zeros(count.shape) for _ in range(4))
    stable = count * stats.isl_mean < cap
    for dv in np.unique(d):
        lm, lc, tables = _capped_table(tuple(stats.isl_points), tuple(stats.isl_probs), max(int(dv), 1))
        sel = d == dv
        c = np.clip(count[sel], 1e-3, 1e4)
        scale = count[sel] / c  # below the axis: linear in the count (at most one prompt on a rank)
        m1, m2, ov, lb = _bilinear(tables, lm, lc, np.log(c), np.log(cap[sel]))
        ey[sel] = m1 * scale
        vy[sel] = np.maximum(m2 - m1 * m1, 0.0) * scale
        pov[sel] = ov
        back[sel] = np.exp(lb)  # over Kingman's backlog (linear in the count below the axis, as it)
    with np.errstate(invalid="ignore", divide="ignore"):
        back = np.where(stable, back * count * stats.isl_sq / (2.0 * (cap - count * stats.isl_mean)), np.inf)
    drift = None if restoring is None else np.maximum(cap - count * stats.isl_mean, 0.0)
    back, cv2 = rank_backlog(router, stats, back, d, restoring, drift)
    return ey, vy, pov, back, stable, cv2


def reflected_ou(kingman_mean, drift, restoring):
    """Mean and squared coefficient of variation of a backlog that drifts down by ``drift`` per
    period with the variance whose reflected random walk has mean ``kingman_mean`` (σ² =
    2·drift·kingman_mean), pulled back in proportion to itself at ``restoring`` per period: the
    stationary density ∝ exp(−b·x − a·x²) on x ≥ 0, b = 2·drift/σ², a = restoring/σ², whose moments
    satisfy b + 2a·E[x] = f(0)/∫f and E[x²] = (1 − b·E[x])/(2a) (arrays broadcast; restoring 0:
    ``kingman_mean`` and 1, the exponential)."""
    from scipy.special import erfcx

    k, mu, g = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (kingman_mean, drift, restoring)))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s2 = 2.0 * mu * k
        a, b = g / s2, 2.0 * mu / s2
        root = np.sqrt(a)
        beta = b / root
        half = 0.5 * np.sqrt(np.pi) * erfcx(0.5 * beta)  # ∫f·√a
        mean = (1.0 / (2.0 * half) - 0.5 * beta) / root
        cv2 = ((1.0 - b * mean) / (2.0 * a) - mean * mean) / (mean * mean)
    use = (g > 0) & (k > 0) & np.isfinite(k) & (mu > 0) & np.isfinite(mean) & (mean > 0)
    return np.where(use, mean, k), np.where(use, np.clip(cv2, 0.0, 1.0), 1.0)


def kingman_factor(stats: WorkloadStats, c2):
    """(Var ISL + c²·E[ISL]²)/E[ISL²]: how a rank's prompt-token backlog, and the diffusion length of
    its tail, scale when its arrival count has index of dispersion c² instead of Poisson's 1."""
    var_isl = max(stats.isl_sq - stats.isl_mean**2, 0.0)
    return (var_isl + c2 * stats.isl_mean**2) / stats.isl_sq


def rank_backlog(router: str, stats: WorkloadStats, backlog, d, restoring=None, drift=None):
    """A rank's mean carried backlog (ISL tokens) from the one of a rank fed by a compound Poisson
    stream of prompts (arrays, d broadcast). The backlog, which integrates many periods, scales as
    the prompt tokens' variance per arrival (Kingman): (Var ISL + c²·E[ISL]²)/E[ISL²] of the Poisson
    one, c² the index of dispersion of the rank's arrival count. Under the balanced router
    (``Engine.rank_router``, d > 1) a rank's prompts arrive as its own slots free up: each of its
    slots is a renewal process (request after request, each living its output's decode iterations),
    and their superposition, Poisson over one period, counts over many periods with the variance of
    the output length's SCV c², not 1. Otherwise the instance's own arrivals set it: renewal
    arrivals with c_a² (``stats.arrival_scv``) thinned over d ranks at random, c² = 1 + (c_a² − 1)/d
    (a load balancer that deals requests to instances in turn makes each one's arrivals smoother
    than Poisson, c_a² = 1/N over N instances).

    ``restoring`` (per period, with ``drift`` = c − count·E[ISL] tokens per period; balanced router
    only): the router's pull on a backlogged rank. Its waiting prompts count towards the level the
    router fills, so they displace decoding sequences, and the completions of those are what refill
    a rank: an excess of w waiting prompts lowers the rank's arrivals by w·E[G]·L/OSL per period, a
    drift back in proportion to the backlog (``reflected_ou``, Poisson period noise). Near
    saturation the backlog lives for many periods and that pull bounds it; over a few periods it
    does not act and the long-run dispersion above sets it: the smaller of the two is taken
    (des.simulate_engine, 9/3 chunked, DES / model backlog at ρ 0.93 / 0.95 / 0.98: 825 / 1,010 /
    1,282 tokens against 792 / 905 / 1,039, where the dispersion alone gave 1,287 / 2,057 / 4,830).
    Returns (mean backlog, its squared coefficient of variation: 1, the exponential's, but where the
    pull bounds it)."""
    one = np.ones(np.shape(backlog))
    if not stats.isl_sq > 0.0 or not stats.osl_mean > 0.0:
        return backlog, one

    d = np.asarray(d)
    backlog = np.asarray(backlog, dtype=float)
    out = backlog
    if np.any(np.asarray(stats.arrival_scv) != 1.0):
        c2 = np.maximum(1.0 + (np.asarray(stats.arrival_scv) - 1.0) / np.maximum(d, 1), 0.0)
        with np.errstate(invalid="ignore"):  # an unstable queue's backlog stays infinite
            out = np.where(np.isfinite(backlog), backlog * kingman_factor(stats, c2), backlog)
    if router != "balanced":
        return out, one
    factor = min(kingman_factor(stats, max(stats.osl_scv, 0.0)), 1.0)
    with np.errstate(invalid="ignore"):  # an unstable queue's backlog stays infinite (not finite: not used)
        bal, cv2 = backlog * factor, one
        if restoring is not None:
            ou, ou_cv2 = reflected_ou(backlog, drift, restoring)
            cv2 = np.where(ou < bal, ou_cv2, 1.0)
            bal = np.minimum(bal, ou)
        use = (d > 1) & np.isfinite(backlog)
        return np.where(use, bal, out), np.where(use, cv2, 1.0)


def balanced_waiting(engine, stats: WorkloadStats, d, cap, count):
    """Prompts a rank holds waiting for its token budget under the balanced router: they hold slots
    the router counts as taken, so the rank's decoding sequences fall short of the level by them
    too. The carried backlog (``capped_tokens``) over E[ISL] at ``count`` prompts per rank per
    context iteration (the gate's first period, before the budget's fixed point) and ``cap`` ISL
    tokens a rank takes per context iteration (None: no budget); 0 without a budget, with one rank
    or the random router, and where the rank's queue is unstable (a limit breaks there)."""
    d = np.asarray(d, dtype=float)
    if engine.rank_router != "balanced" or cap is None or not np.any(d > 1):
        return 0.0
    _, _, _, back, stable, _ = capped_tokens(stats, count, cap, d, engine.rank_router)
    with np.errstate(invalid="ignore"):
        return np.where((d > 1) & stable & np.isfinite(back), back / stats.isl_mean, 0.0)


def rest_max(stats: WorkloadStats, p_over, d, n: int = 256):
    """E[max over d ranks of R_r]: R_r = 0 with probability 1 − ``p_over``, else the rest of the
    prompt that straddles the rank's budget, the forward recurrence of the ISL distribution,
    P(R > y) = E[(ISL − y)⁺] / E[ISL] (arrays p_over, d broadcast). A rest beyond one free budget
    takes the iterations after it, one budget each, so the stall summed over them is the largest
    rest, Σ_j E[max_r min((R_r − j·c)⁺, c)] = E[max_r R_r]."""
    x, p = np.asarray(stats.isl_points, dtype=float), np.asarray(stats.isl_probs, dtype=float)
    p = p / p.sum()
    y = np.linspace(0.0, float(x.max()), n)
    tail_r = np.sum(p * np.maximum(x[None, :] - y[:, None], 0.0), axis=-1) / np.sum(p * x)
    p_over, d = np.broadcast_arrays(np.asarray(p_over, dtype=float), np.asarray(d, dtype=float))
    f = 1.0 - (1.0 - p_over[..., None] * tail_r) ** d[..., None]
    return np.trapezoid(f, y, axis=-1)


def busiest_tokens(stats: WorkloadStats, count, d, router: str = "random"):
    """Mean and variance of the busiest rank's prompt tokens when each of d ranks receives a
    Poisson number of prompts with mean ``count`` (arrays broadcast; d is an integer array).

    ``router`` (``Engine.rank_router``) "random": a rank's tokens are a compound Poisson sum of the
    prompt lengths. "balanced": the router hands each prompt to the rank holding the fewest active
    prompt tokens (the longest first, ``des._route``), so a rank that received a long prompt gets
    the next ones only once the others have caught up, and each assignment corrects the deviation
    the previous ones left: what stays on a rank is its count's share plus one prompt's deviation,
    (N − 1)·E[ISL] + ISL (``_balanced_table``). Against des.simulate_engine at the same rate on
    the scheduler test grid (d = 8, no budget, 24,000 requests): 695 / 1,262 / 1,519 / 1,712 tokens
    against the DES's 716 / 1,257 / 1,500 / 1,701 at 1.05 / 2.79 / 3.64 / 4.29 prompts per rank
    (6/2 30 and 60 %, 9/3 60 %, 6/2 90 %), where the compound sum gives 752 / 1,416 / 1,706 / 1,921
    (the DES's random router 1,406 / 1,697 / 1,916 at the last three)."""
    count, d = np.broadcast_arrays(np.asarray(count, dtype=float), np.asarray(d))
    e_out = count * stats.isl_mean
    v_out = count * stats.isl_sq
    if stats.isl_points is None:
        return e_out, v_out
    table = _balanced_table if router == "balanced" else _busiest_table
    for dv in np.unique(d):
        if dv <= 1:
            continue
        lm, em, vm, _, _ = table(tuple(stats.isl_points), tuple(stats.isl_probs), int(dv))
        sel = d == dv
        c = np.clip(count[sel], 1e-3, 1e4)
        # below the table, E[max] → d·(count·E[ISL]) (at most one rank holds a prompt)
        e_out[sel] = np.interp(np.log(c), lm, em) * count[sel] / c
        v_out[sel] = np.interp(np.log(c), lm, vm) * count[sel] / c
    return e_out, v_out


# ---- padded decode batch ---------------------------------------------------------------------------

def _poisson_cdf(k, mean):
    """P(Poisson(mean) ≤ k), k ≥ 0 integer arrays (Wilson-Hilferty via the gamma relation)."""
    k = np.asarray(k, dtype=float)
    mean = np.maximum(np.asarray(mean, dtype=float), 1e-12)
    # P(N ≤ k) = P(Gamma(k + 1, 1) > mean)
    return 1.0 - gamma_cdf(mean, k + 1.0, k + 1.0)


def _pad(sizes, rows):
    """``rows`` (≥ 1) padded up to the next captured size (unpadded above the largest, or every size
    captured: ``sizes`` None)."""
    if not sizes:
        return rows
    s = np.asarray(sizes, dtype=float)
    idx = np.searchsorted(s, rows, side="left")
    return np.where(idx < len(s), s[np.minimum(idx, len(s) - 1)], rows)


def _padded_exact(sizes, b, d):
    """E[pad(max of d Poisson(b))] (arrays b, d broadcast; sizes ascending tuple or None)."""
    sd = np.sqrt(np.maximum(b, 1e-12))
    top = b + 8.0 * sd + 8.0
    u = np.linspace(0.0, 1.0, 97)
    lo = np.maximum(np.floor(b - 8.0 * sd - 8.0), 0.0)
    ks = np.floor(lo[..., None] + u * (top - lo)[..., None])  # increasing integer support points
    fmax = _poisson_cdf(ks, b[..., None]) ** np.asarray(d, dtype=float)[..., None]
    pm = np.diff(np.concatenate([np.zeros_like(fmax[..., :1]), fmax], axis=-1), axis=-1)
    vals = _pad(sizes, np.maximum(ks, 1.0))
    return np.sum(pm * vals, axis=-1) / np.maximum(np.sum(pm, axis=-1), 1e-30)


PAD_AXIS = np.geomspace(1e-3, 1e5, 1601)
"""Per-rank mean occupancies at which the padded decode rows are tabulated (interpolated between)."""


@lru_cache(maxsize=64)
def _padded_table(sizes, d: int) -> np.ndarray:
    """``_padded_exact`` over ``PAD_AXIS`` (kept on disk between processes, ``table_cache``)."""
    return table_cache.persisted("padded", _build_padded_table, tuple(sizes or ()), int(d))[0]


def _build_padded_table(sizes: tuple, d: int):
    return (_padded_exact(sizes, PAD_AXIS, d),)


BALANCED_NODES = 20
"""Support points of the fewest completions over the ranks (``_padded_balanced``)."""


def _padded_balanced(sizes, b, d, mu, cap=None):
    """E[pad(busiest rank's decoding sequences)] under the balanced router (``Engine.rank_router``):
    the router refills the ranks' freed slots, so since the last refill rank r holds the level less
    its j_r completions, j_r ~ Poisson(μ) independent; the busiest rank is b + μ − min_r j_r
    (b = B/d the mean), P(min j ≥ k) = P(Poisson(μ) ≥ k)^d. A fractional count is the mix of its
    two neighbouring integers (arrays b, d, mu broadcast)."""
    b, d, mu = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (b, d, mu)))
    if b.size == 0:
        return b.copy()
    k = np.arange(BALANCED_NODES, dtype=float)
    ge = (1.0 - _poisson_cdf(k[1:] - 1.0, mu[..., None])) ** d[..., None]  # P(min j ≥ k), k ≥ 1
    ge = np.concatenate([np.ones(b.shape + (1,)), ge, np.zeros(b.shape + (1,))], axis=-1)
    pk = np.maximum(ge[..., :-1] - ge[..., 1:], 0.0)
    pk = pk / np.maximum(np.sum(pk, axis=-1, keepdims=True), 1e-30)
    if not sizes and cap is None:  # no padding, no cap: the mix is linear, the mean is exact
        return np.maximum(b + mu - np.sum(pk * k, axis=-1), 1.0)
    # the instance's count moves the level of every rank together: B' ~ Poisson(B), the level
    # B'/d ~ Normal(b, b/d) (Gauss-Hermite nodes)
    z, w = _GH
    lvl = b[..., None] + np.sqrt(np.maximum(b / d, 0.0))[..., None] * z
    x = np.maximum(lvl[..., :, None] + (mu[..., None] - k)[..., None, :], 1.0)
    if cap is not None:  # a rank never runs more than its max_batch_size sequences
        x = np.minimum(x, cap)
    # between whole counts the padded rows are the linear mix of their neighbours' (x ≥ 1): the
    # interpolant of pad on the whole numbers, pad(n) = n beyond the largest captured size
    table = _pad_table(tuple(sizes or ()))
    top = len(table) - 1
    val = np.interp(x, np.arange(float(top + 1)), table, right=np.nan)
    val = np.where(x > top, x, val)
    return np.einsum("...ik,i,...k->...", val, w, pk)


@lru_cache(maxsize=64)
def _pad_table(sizes: tuple) -> np.ndarray:
    """``_pad(sizes, n)`` for the whole n = 0 … largest size + 1 (above it pad(n) = n: the caller
    takes n itself there)."""
    n = np.arange(float((sizes[-1] if sizes else 0) + 2))
    return np.asarray(_pad(sizes, n), dtype=float)


_GH = (lambda z, w: (z * np.sqrt(2.0), w / np.sqrt(np.pi)))(*np.polynomial.hermite.hermgauss(7))


def padded_rows(engine, batch, d, refill=None):
    """Expected decode rows per rank: the busiest rank's occupancy padded up to the next captured
    graph size (eager, unpadded, above the largest). Balanced router (``Engine.rank_router``): the
    mean plus the spread of the completions since the last refill, ``refill`` of them per rank on
    average (``_padded_balanced``); random: Poisson(B/d) per rank, tabulated per (sizes, d) over the
    per-rank occupancy and interpolated in log occupancy."""
    b, d = np.broadcast_arrays(np.asarray(batch, dtype=float) / d, np.asarray(d, dtype=float))
    sizes = engine.graph_sizes
    out = np.array(b, dtype=float, copy=True)
    balanced = engine.rank_router == "balanced" and refill is not None
    multi = d > 1
    if balanced and np.any(multi):
        out[multi] = _padded_balanced(sizes, b[multi], d[multi], np.broadcast_to(refill, b.shape)[multi],
                                      engine.max_batch_size)
    for dv in np.unique(d):
        if sizes is None and dv == 1:  # one rank, every size captured: the mean occupancy itself
            continue
        if balanced and dv > 1:
            continue
        sel = d == dv
        bb = np.clip(b[sel], PAD_AXIS[0], PAD_AXIS[-1])
        out[sel] = np.interp(np.log(bb), np.log(PAD_AXIS), _padded_table(sizes, int(dv))) * b[sel] / bb
    return out


# ---- admission gate ----------------------------------------------------------------------------------

ALIVE_TOL = 1e-15
"""Probability mass of gate periods still open below which ``gate_moments`` stops its walk over the
timeout's checks (the Offline recipes' 500-iteration timeout; the mass left is below the moments' float
precision: every bundled prediction is bit-identical to the full walk)."""


SETTLED = 1e-17
"""A term below this fraction of a float sum leaves it unchanged (half a unit in the last place is
≥ 2⁻⁵³ ≈ 1.1e-16 of it): ``gate_moments`` drops a grid point from its walk once every later term is."""


GATE_BLOCK = 16
"""Checks of the admission gate ``gate_moments`` walks at once (vectorized along a new leading axis;
the walk stops after a block that leaves no period open beyond ``ALIVE_TOL``; a grid point leaves it
earlier once the rest of its walk cannot change its sums, ``SETTLED``)."""


def _running(op, a):
    """``op``'s running total along the leading axis, in place, row by row (the order of a loop, and
    faster than ``ufunc.accumulate`` along a leading axis)."""
    for i in range(1, len(a)):
        op(a[i - 1], a[i], out=a[i])


def gate_moments(e, batch, d, per_iter, offset=0.0, carried=0.0, others=None, first_offset=None):
    """E[G], Var[G] and the third central moment of the iterations between context iterations
    (1, 0, 0 with the gate off).

    ``per_iter`` + ``offset``: a rank's mean arrivals by the k-th check after an admission are
    per_iter·k + offset (offset: arrivals during the period's prefill stalls); ``first_offset``
    (default ``offset``) in place of ``offset`` at the first check, when part of the stall comes
    after it (gated chunked prefill: the straddling prompts' rests stall the iteration after the
    admitting one, whose arrivals the second check sees first);
    ``carried``: the chance a rank still holds a prompt the last admission left for lack of budget;
    ``others``: the ranks whose prompts the gate waits for (default d; d − 1 for the period seen by
    a rank that holds a prompt at every check).
    """
    d = np.asarray(d, dtype=float)
    batch = np.asarray(batch, dtype=float)
    on = (d > 1) & (e.gate_timeout_iters > 0)
    # gate off: a context iteration every ``decode_steps`` iterations (multi-step scheduling: the
    # scheduler, and with it admission, runs once per group of that many decode iterations)
    steps = float(admission_period(e))
    if not np.any(on):
        z = np.zeros(np.broadcast(batch, d).shape)
        return z + steps, z, z
    T, W = int(e.gate_timeout_iters), int(e.gate_wait_iters)
    p_idle = 1.0 - (1.0 - np.exp(-batch / d)) ** d  # some rank has no running sequence
    shape = np.broadcast(per_iter, offset, d).shape
    size = int(np.prod(shape))
    flat = lambda a: np.broadcast_to(a, shape).reshape(size)  # noqa: E731
    p_busy = flat(1.0 - p_idle)
    per, off_all, keep, dd = flat(per_iter), flat(offset), flat(1.0 - carried), flat(d)
    first = off_all if first_offset is None else flat(first_offset)
    expo = dd if others is None else flat(others)
    idle_all = flat(p_idle)
    alive = np.ones(size)  # no admission yet, not every rank has a prompt
    f_prev = np.zeros(size)
    m = np.zeros((3, size))  # the raw moments E[G], E[G²], E[G³]
    act = np.arange(size)  # the periods still open (an index into the flattened grid)
    g_max = float(T + W)  # the longest period
    # The checks k = 1 … T, a block of them at a time along a new leading axis. Per check k: the
    # chance h_all that every rank holds a prompt for the first time (the gate admits after the
    # wait W, if busy), else h_idle that some rank is idle while another holds one (it admits at
    # once); the timeout admits at T. The period's law is the walk over the checks of the mass
    # still open (``alive``), the same products and sums in the same order as check by check; a
    # grid point leaves the walk once what is left of it cannot change its sums (``SETTLED``).
    for k0 in range(1, T + 1, GATE_BLOCK):
        k = np.arange(k0, min(k0 + GATE_BLOCK, T + 1), dtype=float)[:, None]
        n = len(k)
        pick = lambda a: a[act]  # noqa: E731  (the points still walking)
        pb, dk = pick(p_busy), pick(dd)
        off = pick(off_all) if first_offset is None or k0 > 1 else np.where(k == 1, pick(first), pick(off_all))
        none = pick(keep) * np.exp(-(pick(per) * k + off))  # this rank holds no prompt
        f = np.broadcast_to((1.0 - none) ** pick(expo), (n, act.size))
        f_before = np.concatenate([pick(f_prev)[None], f[:-1]])
        h_all = np.clip((f - f_before) / np.maximum(1.0 - f_before, 1e-300), 0.0, 1.0)
        h_idle = np.empty((n, act.size))
        h_idle[...] = pick(idle_all) * (1.0 - none**dk)
        h_idle[k.reshape(-1) == T] = 1.0  # the timeout admits whatever is open
        # alive before check k, then after its admission by every rank (``rest``), interleaved
        walk = np.empty((2 * n + 1, act.size))
        walk[0], walk[1::2], walk[2::2] = pick(alive), 1.0 - h_all, 1.0 - h_idle
        _running(np.multiply, walk)
        adm, idle = walk[0:-1:2] * h_all, walk[1::2] * h_idle
        g_all = k + W * pb
        terms = np.empty((2 * n + 1, 3, act.size))
        terms[0] = m[:, act]
        terms[1::2, 0], terms[2::2, 0] = adm * g_all, idle * k
        terms[1::2, 1], terms[2::2, 1] = adm * (k * k + (2 * k * W + W * W) * pb), idle * k * k
        terms[1::2, 2], terms[2::2, 2] = adm * g_all**3, idle * k**3
        _running(np.add, terms)
        m[:, act], alive[act], f_prev[act] = terms[-1], walk[-1], f[-1]
        if not np.any(walk[-1] > ALIVE_TOL):  # every period resolved (long Offline timeouts)
            break
        # a point leaves once no later term can change its moments: every term still to come is at
        # most its open mass × (T + W)^j, below half a unit in the last place of the moment it adds to
        # (the sums then come out bit for bit as the walk's to the end)
        rest = walk[-1] * g_max
        act = act[(rest > SETTLED * terms[-1, 0]) | (rest * g_max > SETTLED * terms[-1, 1])
                  | (rest * g_max * g_max > SETTLED * terms[-1, 2])]
    m = m.reshape((3,) + shape)
    m1, m2, m3 = m
    m1 = np.where(on, m1, steps)
    var = np.where(on, np.maximum(m2 - m1 * m1, 0.0), 0.0)
    mu3 = np.where(on, m3 - 3.0 * m1 * var - m1**3, 0.0)
    return m1, var, mu3


# ---- the engine -----------------------------------------------------------------------------------------

def server(plan: Plan, layout: Layout, batch, stats: WorkloadStats, percentile: float = 99.0,
           workers=1.0, *, means_only: bool = False) -> EngineResult:
    """Renewal arrivals (Poisson unless ``stats.arrival_scv`` ≠ 1) into one instance at mean
    occupancy B (Server/Interactive), costed by ``step_cost``: decode iterations at the padded
    per-rank batch, the prefill increment of a context iteration at the number of prompts it admits
    and the busiest rank's share. Arrivals switching slowly between rates (``stats.rate_states``)
    go through ``rate_states_mix``. ``means_only``: skip the percentiles (NaN), for callers that
    read only means (calibrate's operating points)."""
    if stats.rate_states is None:
        return _server(plan, layout, batch, stats, percentile, workers, not means_only)
    one = replace(stats, rate_states=None, arrival_scv=1.0)  # Poisson within a state
    return rate_states_mix(lambda b: _server(plan, layout, b, one, percentile, workers), batch, stats.rate_states,
                           percentile / 100.0)


def offline(plan: Plan, layout: Layout, batch, stats: WorkloadStats, workers=1.0) -> ServingResult:
    """Offline steady state at occupancy B per instance.

    One attention rank (d = 1): ``serving.offline``'s mixed step, every iteration carrying the
    B·L/OSL prompts that replace the finished sequences. With attention DP (d > 1) this is the
    saturated engine of ``server``: every rank always has prompts waiting (LoadGen issues the whole
    Offline query at once), so at the batch cap what opens the attention-DP gate is a free slot
    on every rank, and a rank's slots freed since the last admission are Poisson(k·B·L/(OSL·d))
    after k iterations, the distribution of the arrivals that open it at occupancy B there; a
    context iteration admits them, the busiest rank's prompt tokens set its stall, and the other
    iterations replay their CUDA graphs. Below the cap the real gate opens sooner (every rank has
    a free slot, so after ``gate_wait_iters`` + 1 iterations); the model keeps the cap's period.

    Why: the mixed step put about one prompt a step on one rank (DeepSeek-R1 at 512 sequences a
    rank on 8 ranks: 1.1 prompts a step, the busiest rank's attention block at 7.3× its mean share
    of them, every step eager), where TensorRT-LLM's gate (timeout 500, wait 10 in the B200 / B300
    Offline recipes) admits the freed slots of ~30 iterations at once. Against ``des.simulate_engine``
    run saturated (tests/test_scheduler.py::test_saturated_engine_is_the_offline_steady_state):
    within 1 % at gates 500/10, 6/2 and off, where the mixed step is 15 % low at 500/10.
    """
    adp = np.asarray(layout.dp) > 1
    if not np.any(adp):
        return serving_offline(plan, layout, batch, stats, workers)
    eng = _server(plan, layout, batch, stats, workers=workers, quantiles=False)
    # as ``serving.offline``: a prompt's first token comes with the (context) iteration that admits it
    ttft = eng.decode_iteration_s + eng.gate_iters * (eng.iteration_s - eng.decode_iteration_s)
    res = ServingResult(tokens_per_s=eng.tokens_per_s, rate=eng.rate, ttft_mean=ttft, ttft_p99=ttft,
                        tpot_mean=eng.tpot_mean, tpot_p99=eng.tpot_mean, e2e_p99=ttft + stats.osl_p99 * eng.tpot_mean,
                        step=eng.step, prefill_share=eng.prefill_share, shape=eng.shape)
    # a grid mixing one-rank layouts: the mixed step there (a pinned attention-DP layout never prices it)
    return res if np.all(adp) else _where(adp, res, serving_offline(plan, layout, batch, stats, workers))


def _where(mask, a, b):
    """``a`` where ``mask`` else ``b``, elementwise through dataclasses and dicts of arrays (a field
    that is None on either side stays None)."""
    if a is None or b is None:
        return None
    if isinstance(a, dict):
        return {k: _where(mask, a[k], v) for k, v in b.items()}
    if is_dataclass(a):
        return type(a)(**{f.name: _where(mask, getattr(a, f.name), getattr(b, f.name)) for f in fields(a)})
    return np.where(mask, a, b)


RATE_MATCH_ITERS = 4
"""Fixed-point steps that set each rate state's occupancy to carry its share of the arrivals."""


def rate_states_mix(run, batch, rate_states, q: float) -> EngineResult:
    """Arrivals switching slowly between rates, quasi-static: ``run(B)`` (the engine at occupancy B,
    one state) at the mean occupancy gives the mean rate λ̄ = λ(B); each state i runs at the
    occupancy B_i carrying its rate f_i·λ̄ (fixed-point steps B_i ← B_i·f_i·λ̄/λ(B_i) from B·f_i:
    a busy state's requests stay longer, so B_i grows faster than f_i), and the states mix by
    ``serving.mix_rate_states``; a limit broken in any state is broken."""
    batch = np.asarray(batch, dtype=float)
    base = run(batch)
    lam, tokens = base.rate, base.tokens_per_s
    states = []
    for f, _ in rate_states:
        b = batch * f
        for _ in range(RATE_MATCH_ITERS):
            r = run(b)
            with np.errstate(divide="ignore", invalid="ignore"):
                step = np.clip(f * lam / r.rate, 0.25, 4.0)
            b = np.where(np.isfinite(step) & (r.prefill_share < 1), b * step, b)
        states.append(run(b))
    res = mix_rate_states(base, states, [w for _, w in rate_states], q)
    res.rate, res.tokens_per_s = lam, tokens  # the states carry f_i·λ̄: the time average is λ̄
    for r in states:  # the first broken limit of any state
        res.reason = np.where(res.ok & ~r.ok, r.reason, res.reason)
        res.ok = res.ok & r.ok
    return res


def instance_arrival_scv(engine, scv, workers, osl_scv: float = 1.0):
    """c_a² of one instance's arrivals when the system's (c_a² = ``scv``) are handed to ``workers``
    instances by ``engine.instance_dispatch`` (arrays broadcast); ``osl_scv`` the output length's
    squared coefficient of variation.

    Notes
    -----
    "random" thinning keeps a renewal stream's c_a² (Poisson stays Poisson). Dealt in turn
    ("round_robin"), an instance's gap is the sum of N system gaps: mean N/λ, variance N·c²/λ², so
    c_a² = c²/N (Erlang-N from Poisson; exact, tests/test_instance_dispatch.py against the DES).
    "load_balancing" (the instance with the fewest requests in flight: NVIDIA
    ``traffic_distribution_policy``, AMD ``shortest_queue``) keeps the instances' counts level, so
    an instance takes a request as one of its own slots frees up, as the balanced rank router does
    within an engine (``rank_backlog``): its arrivals are the superposition of its slots' renewal
    processes (request after request, each living its output's decode iterations), whose counts
    over the many periods a prompt backlog integrates have the dispersion of the output length's
    SCV. Taken as that, at most the system's c² and at least the round-robin deal's c²/N.
    "fewest_tokens" keeps the system's c²: its effect is the pooled prompt queue
    (``pooled_backlog``), priced there."""
    how = engine.instance_dispatch
    if how in ("random", "fewest_tokens"):  # the latter's pooling is the prompt queue's (``pooled_backlog``)
        return scv
    n = np.maximum(np.asarray(workers, dtype=float), 1.0)
    dealt = np.asarray(scv, dtype=float) / n
    if how == "round_robin":
        return dealt
    system = np.asarray(scv, dtype=float)
    refill = np.minimum(system * max(osl_scv, 0.0), system)
    return np.where(n > 1, np.maximum(dealt, refill), system)  # one instance: the system's own stream


def erlang_c(n, a):
    """Erlang's C: the chance an arrival waits in an M/M/n queue of offered load ``a`` = λ/μ (arrays
    broadcast, n whole ≥ 1; 1 where a ≥ n). By Erlang B's recursion B_k = a·B_{k−1}/(k + a·B_{k−1}),
    then C = n·B_n/(n − a·(1 − B_n))."""
    n, a = np.broadcast_arrays(np.maximum(np.round(np.asarray(n, dtype=float)), 1.0), np.asarray(a, dtype=float))
    b = np.ones(n.shape)
    for k in range(1, int(np.max(n, initial=1.0)) + 1):
        b = np.where(k <= n, a * b / (k + a * b), b)
    with np.errstate(divide="ignore", invalid="ignore"):
        c = n * b / (n - a * (1.0 - b))
    return np.where(a < n, np.clip(c, 0.0, 1.0), 1.0)


def pooled_backlog(p_over, backlog, rho, instances):
    """A rank's chance to carry a prompt backlog and its mean backlog when the front end sends each
    request to the instance with the fewest prompt tokens waiting (``instance_dispatch``
    "fewest_tokens"), from the same figures of an instance fed alone (``p_over``, ``backlog`` at
    per-instance load ``rho``), ``instances`` of them.

    Notes
    -----
    Joining the instance with the least work left is first come, first served over the pooled
    instances (an arrival waits exactly what it would wait for the first of n servers to free up in
    a central queue), so the n prefill queues are one M/G/n. The M/G/n-to-M/G/1 ratios of the
    Allen-Cunneen approximation, at the same per-server load ρ, carry over: a prompt finds a
    backlog with Erlang's C(n, nρ) in place of ρ, and the backlog it finds is n times shorter, so
    the mean backlog per instance scales by C(n, nρ)/(nρ). One instance (n = 1): unchanged."""
    rho = np.clip(np.asarray(rho, dtype=float), 1e-12, None)
    n = np.maximum(np.asarray(instances, dtype=float), 1.0)
    c = erlang_c(n, n * rho)
    p = np.clip(np.asarray(p_over, dtype=float) * c / rho, 0.0, 1.0)  # C ≤ 1
    return p, np.asarray(backlog, dtype=float) * c / (n * rho)


def _server(plan: Plan, layout: Layout, batch, stats: WorkloadStats, percentile: float = 99.0,
            workers=1.0, quantiles: bool = True) -> EngineResult:
    scv = instance_arrival_scv(plan.engine, stats.arrival_scv, workers, stats.osl_scv)
    if np.any(np.asarray(scv) != stats.arrival_scv):
        stats = replace(stats, arrival_scv=scv)
    dq = 1.0 + plan.serving.draft_depth
    d = np.asarray(layout.dp, dtype=float)
    batch = np.asarray(batch, dtype=float)
    plen, plen_sq = _prefill(stats, prefix_hit(plan, workers))
    cache = {}

    def shape_at(rows, b):  # ``rows`` padded decode rows per rank carrying the KV of ``b`` sequences
        return Shape(decode_seqs=rows * d, decode_q=dq, decode_ctx=stats.context_mean * b / np.maximum(rows * d, 1e-30))

    def prefill_shape(decode_shape, n, imb):
        return replace(decode_shape, prefill_seqs=n, prefill_len=plen, prefill_len_sq=plen_sq,
                       prefill_rank_imbalance=imb, prefill_patches=stats.vision_patches,
                       prefill_patches_sq=stats.vision_patches_sq)

    def decode_times(pairs, first=None):
        """The decode iteration (step and host time) at each (rows per rank, occupancy) pair in one
        ``step_cost`` evaluation, the last pair the decode step itself (cached for the prefill
        increments), and with ``first`` = (n, imb) the first context iteration's ``prefill_time``
        too: the steps stacked on a new leading axis (elementwise, the same numbers at a fraction
        of the calls)."""
        shapes = [shape_at(r, b) for r, b in pairs]
        decode = shapes[-1]
        if first is not None:
            shapes.append(prefill_shape(decode, *first))

        def field(x, n):  # a Shape field as an array (prefill_patches_sq None: one image, its square)
            v = getattr(x, n)
            return np.asarray(x.prefill_patches, dtype=float) ** 2 if v is None else np.asarray(v, dtype=float)

        names = [f.name for f in fields(Shape)]
        one = np.broadcast_shapes(*(np.shape(field(x, n)) for x in shapes for n in names))
        stacked = Shape(**{n: np.stack([np.broadcast_to(field(x, n), one) for x in shapes]) for n in names})
        step = step_cost(plan, layout, stacked)
        full = (len(shapes),) + one
        last = len(pairs) - 1
        cut = lambda a, i=last: np.broadcast_to(a, full)[i]  # noqa: E731
        cache["decode"] = (decode, StepCost(
            total=cut(step.total), by_kind={k: cut(v) for k, v in step.by_kind.items()},
            compute_bound=cut(step.compute_bound), memory_bound=cut(step.memory_bound),
            comm_exposed=cut(step.comm_exposed)))
        out = [cut(step.total, i) + plan.engine.host_time(b) for i, (_, b) in enumerate(pairs)]
        if first is not None:
            out.append(per_prompt(cut(step.total, len(pairs)), first[0]))
        return out

    def per_prompt(total, n):  # a context iteration's time beyond the cached decode step, per prompt
        return np.maximum(total - cache["decode"][1].total, 0.0) / n

    def prefill_time(n, imb):
        return per_prompt(step_cost(plan, layout, prefill_shape(cache["decode"][0], n, imb)).total, n)

    res = engine_queue(plan.engine, d, batch, stats, plan.serving.tokens_per_step, percentile / 100.0,
                       lambda rows: decode_times([(rows, batch)])[0], prefill_time, dq=dq,
                       prompt_scale=plen / stats.isl_mean, decode_times=decode_times, quantiles=quantiles,
                       instances=workers)
    res.tpot_p99 = res.tpot_p99 * tpot_spread(plan, percentile / 100.0)
    res.tpot_p50 = res.tpot_p50 * tpot_spread(plan, 0.5)
    res.shape, res.step = cache["decode"]
    return res


def engine_queue(engine, d, batch, stats: WorkloadStats, L: float, q: float, decode_time, prefill_time, *,
                 dq: float = 1.0, prompt_scale: float = 1.0, decode_time_at=None, decode_times=None,
                 quantiles: bool = True, instances=1.0) -> EngineResult:
    """The scheduler's closed form for given iteration costs.

    ``decode_time(rows)``: decode iteration time with ``rows`` sequences per rank (padded);
    ``prefill_time(n, imbalance)``: extra context-iteration time per prompt when n prompts are
    admitted together and the busiest rank holds ``imbalance`` × the mean rank's prompt tokens.
    ``prompt_scale``: prompt tokens actually prefilled per ISL token (prefix-cache misses).
    ``decode_time_at(rows, batch)``: the decode iteration at another occupancy (its KV reads
    too), for the step's slope; default ``decode_time(rows)``. ``decode_times(pairs, (n, imbalance))``: both
    at once (``decode_time_at`` of each (rows, batch) pair, the last the decode step itself) and the
    first ``prefill_time``, where given.
    ``quantiles`` False: the means only (``_metrics``). ``instances``: how many of this engine the
    front end feeds (``engine.instance_dispatch`` "fewest_tokens" pools their prompt backlogs).
    """
    d = np.asarray(d, dtype=float)
    batch = np.asarray(batch, dtype=float)
    # Little's law on the decode side: B·L/OSL prompts arrive per iteration
    per_iter = batch * L / (stats.osl_mean * d)
    eg, vg, g3 = gate_moments(engine, batch, d, per_iter)
    gated = (d > 1) & (engine.gate_timeout_iters > 0)
    budget = engine.max_num_tokens is not None and stats.isl_points is not None
    # ISL tokens a rank can take per context iteration: its budget left beside its decode tokens
    cap = engine.free_tokens(batch / d * dq) / prompt_scale if budget else None
    # balanced router: a rank's freed slots are refilled at the next admission; on average a
    # decode iteration sees the completions of half a period since (as many as the arrivals),
    # and the prompts a rank holds waiting for its token budget
    refill = per_iter * (eg + 1.0) / 2.0 + balanced_waiting(engine, stats, d, cap, per_iter * eg)
    # the decode step's slope dt_d/dB for the decode count's drift (serving.decode_drift)
    up = batch * (1.0 + DRIFT_STEP)
    rows_up = padded_rows(engine, up, d, refill * (1.0 + DRIFT_STEP))
    rows = padded_rows(engine, batch, d, refill)
    pairs = [(rows_up, up), (rows, batch)]
    if decode_times is None:  # else priced with the first context iteration (below)
        t_up = (decode_time_at or (lambda r, b: decode_time(r)))(rows_up, up)
        t_d = decode_time(rows)
    if budget and engine.chunked_prefill:
        # gated, a rank admits prompts while its budget lasts and the last one admitted goes on in
        # the following iterations, gate or not: it takes one prompt's overshoot more per context
        # iteration (mean overshoot of a renewal sum past a level, E[ISL²]/(2·E[ISL]))
        cap_c, ov = cap, stats.prompt_overshoot
        cap = np.where(gated, cap + ov, cap)
    elif budget:
        # whole prompts (no chunking): a rank takes prompts in order while the next one fits, so a
        # context iteration that leaves some waiting leaves its budget's last gap unused, the age
        # of the prompts' renewal sum at c (mean E[ISL²]/(2·E[ISL]) once c holds a few prompts;
        # des.simulate_engine, vLLM multi-step 9 at 90 %: 193 of 1,989 tokens, the wait in
        # context iterations 0.98 against 0.95 for a rank taking up to c − 193 tokens of them)
        fit = cap
        cap = whole_prompt_budget(stats, cap)
    carried, tail, ctx_share, first = 0.0, None, 1.0, None
    # gated with a budget the gate period G and the carried prompts feed each other (a longer period
    # carries more, which opens the gate sooner): the fixed point G = f(G), f decreasing, is
    # bracketed and bisected (plain iteration can cycle, e.g. G 4 ↔ 8.3 at 9/3 chunked); otherwise
    # a few plain steps (non-chunked budgets: not yet checked against the DES with the bisection)
    search = budget and engine.chunked_prefill and np.any(gated)
    steps = BISECT_STEPS if search else 3 if np.any(gated) else 1
    lo, hi = np.ones_like(eg), np.ones_like(eg) * float(engine.gate_timeout_iters + engine.gate_wait_iters + 1)
    for step in range(steps):
        # prompts per context iteration (at least one) and the busiest rank's tokens
        n = np.maximum(batch * L / stats.osl_mean * eg, 1.0)
        big_mean, big_var = busiest_tokens(stats, n / d, d, engine.rank_router)
        if budget:  # at most ``cap`` per rank, the rest carried: the busiest rank's share shrinks
            # by the capped / uncapped ratio at the ranks' mean arrivals per context iteration
            m_true = batch * L / stats.osl_mean * eg / d
            c_mean, c_var, carried, backlog, stable, _ = capped_tokens(stats, m_true, cap, d, engine.rank_router)
            # (the capped tables are the compound sums', so the ratio is taken against the same)
            u_mean = busiest_tokens(stats, m_true, d)[0]
            big_mean = big_mean * np.clip(c_mean / np.maximum(u_mean, 1e-30), 0.0, 1.0)
            big_var = c_var  # the busiest rank's capped tokens per context iteration vary this much
            if engine.chunked_prefill and np.any(gated):
                # gated, the context iteration takes at most c on a rank; the started prompt's rest
                # is prefilled in the next iteration, whose stall is the largest rest over the ranks
                # (des.simulate_engine, 6/2 chunked at 30 / 60 %: busiest rank 482 / 488 tokens in
                # the context iteration, 194 / 367 in the next; this gives c = 498 / 480 and
                # 141 / 373). A rank holds a rest with about the chance it carries (``carried``)
                p_c = carried
                # A rest longer than the free budget goes on in the iterations after, one budget
                # each: summed over them the stall is the largest rest itself, uncapped
                # (des.simulate_engine: a second rest iteration in 27 % of the periods at 6/2 60 %,
                # 42 % at 9/3 90 %; capped at one budget the stall per iteration was 6-7 % short,
                # 2.97 against 3.17 ms and 3.57 against 3.83 ms, and TPOT 1-1.5 %)
                tail = rest_max(stats, p_c, d)
                big_mean = np.where(gated, np.minimum(big_mean, cap_c) + tail, big_mean)
                # the admitting iteration's share of the period's stall (the rest is after it)
                ctx_share = np.where(gated, 1.0 - tail / np.maximum(big_mean, 1e-30), 1.0)
        imb = np.where(d > 1, big_mean / np.maximum(n / d * stats.isl_mean, 1e-30), 1.0)
        if step == 0 and decode_times is not None:  # the decode steps and the first context iteration
            t_up, t_d, s_mean = decode_times(pairs, (n, imb))
            imb0 = imb
        elif step in (0, steps - 1):  # priced by the step cost at the first and the last step
            s_mean, imb0 = prefill_time(n, imb), imb
        else:  # in between, the stall per prompt follows the busiest rank's share
            s_mean = s_mean * imb / np.maximum(imb0, 1e-30)
            imb0 = imb
        if np.any(gated):  # arrivals per check: decode iterations plus the admitting iteration's stall
            rate = request_rate(batch, t_d, s_mean, L, stats)
            stall = rate * s_mean * eg * t_d / (1.0 - rate * s_mean)
            # ``carried``: ranks that carry a prompt into the next context iteration. The first
            # check after an admission sees the arrivals of the admitting iteration only, its
            # context stall; the rests' stall comes in the next iteration (des.simulate_engine,
            # 6/2 chunked 90 %: 0.9 arrivals per rank by the first check, the gate open there in
            # 60 % of the periods; with the whole stall before the first check 1.3 and 78 %)
            off1 = rate * stall / d * ctx_share
            f, vg, g3 = gate_moments(engine, batch, d, rate * t_d / d, rate * stall / d, carried, first_offset=off1)
            if search and step < steps - 1:
                above = f > eg
                lo, hi = np.where(above, eg, lo), np.where(above, hi, eg)
                eg = np.where(gated, 0.5 * (lo + hi), f) if step > 0 else f
            else:
                eg = f
    s_sq = s_mean * s_mean * stats.isl_sq / stats.isl_mean**2  # S ∝ prompt length
    big_mean, big_var = big_mean * prompt_scale, big_var * prompt_scale**2
    # renewal arrivals (c_a² ≠ 1): a rank's count per period has variance (1 + (c_a² − 1)/d) × its
    # mean (thinning by 1/d), the busiest rank's tokens that much more; smooth ones (c_a² < 1) take
    # it down to at most the prompts' own spread, E[N]·Var[ISL], the Var[ISL]/E[ISL²] share of the
    # Poisson variance (a token budget's capped variance too: the count's excess is the uncapped
    # one, and subtracting it whole drove the variance, the period and TTFT below zero)
    big_var_a = big_var
    if np.any(np.asarray(stats.arrival_scv) != 1.0):
        excess = (np.asarray(stats.arrival_scv) - 1.0) * n / (d * d) * (stats.isl_mean * prompt_scale) ** 2
        big_var_a = np.maximum(big_var + excess, big_var * (1.0 - stats.isl_mean**2 / stats.isl_sq))
    # cost per token of the busiest rank's prompt tokens: X = s_tok·(busiest tokens)
    s_tok = s_mean * n / np.maximum(big_mean, 1e-30)
    # stall of one more prompt on the busiest rank (the requests that come with a tagged one)
    s_extra = np.where(d > 1, s_tok * stats.isl_mean * prompt_scale / d, s_mean)
    extra = None
    slope = (t_up - t_d) / (up - batch)
    if budget:  # the backlog of a rank's queue at its mean arrivals per context iteration
        m_rank = batch * L / stats.osl_mean * eg / d
        eg_b = eg
        if np.any(gated):  # the gate's last step moved E[G]
            # a rank that carries a backlog holds a prompt at every check, so while it drains the
            # gate waits only for the other d − 1 ranks: its periods are shorter than the mean
            # period (measured in des.simulate_engine, 9/3 chunked 60 %: every rank's queue
            # drains at one budget plus a prompt's rest per period, and at the mean period
            # the Lindley backlog would be 1.6 × the DES's TTFT)
            g_b = gate_moments(engine, batch, d, rate * t_d / d, rate * stall / d, carried, others=d - 1,
                               first_offset=off1)[0]
            eg_b = np.where(gated, np.minimum(g_b, eg), eg)
            # its period is shorter by decode iterations only, the period's prefill stall stays:
            # arrivals λ·(E[G_b]·t_d + X)/d, not the mean iteration's λ·E[G_b]·t_d/(1 − ρ)/d
            # (des.simulate_engine, 9/3 chunked 90 %: a backlogged rank's periods 1.7 % fewer
            # iterations and 1.2 % shorter than the mean one, 82.0 against 83.0 ms; the rank's
            # queue is then at 95 % load, where 1 % more arrivals is 20 % more backlog)
            m_back = rate * (eg_b * t_d + stall) / d
            # the balanced router pulls a backlogged rank back (``rank_backlog``): E[G_b]·L/OSL of an
            # excess waiting prompt's displaced decoding sequence completes per period
            _, _, p_over, backlog, stable, backlog_cv2 = capped_tokens(stats, m_back, cap, d, engine.rank_router,
                                                                       restoring=eg_b * L / stats.osl_mean)
        else:  # E[G] = 1 throughout: the loop's own figures at m_rank = m_true
            p_over, backlog_cv2 = carried, 1.0
        # a prompt that waits does so behind a full rank: each context iteration it waits is one
        # whose busiest rank takes the whole budget (the decode iterations of the period plus it)
        full = eg_b * t_d + s_tok * (cap if tail is None else cap_c + tail) * prompt_scale
        ungated = ~np.broadcast_to(gated, np.shape(full))
        decay = np.inf
        if np.any(ungated):
            # no gate: while a rank carries a backlog every iteration takes its whole budget and
            # lasts ``full``, so the backlog's queue (Lindley over such iterations) receives the
            # arrivals of a full iteration, not of the mean one: in time units the prefill of a
            # rank is an M/G/1 queue served at c tokens per ``full`` seconds (des.simulate_engine,
            # 405B B200 Server at 0.95 qps per instance: TTFT p99 4.57 s; at the mean iteration's
            # arrivals the backlog's load is 0.33 instead of 0.61 and the closed form's p99 3.03 s)
            rate_it = request_rate(batch, t_d, s_mean, L, stats)
            m_full = rate_it * full / d
            _, _, p_u, back_u, stable_u, _ = capped_tokens(stats, m_full, cap, d, engine.rank_router)
            # its tail decays at the Cramér-Lundberg rate (the prompts behind a backlog, ``_metrics``);
            # on one rank the decoders that working it off adds lengthen it (``backlog_feedback``)
            # (renewal arrivals: the diffusion's rate 2·slack/Var, the count's variance scaled by
            # their dispersion c_a², and no longer than the backlog's mean, ``rank_backlog``)
            spread = kingman_factor(stats, np.asarray(stats.arrival_scv, dtype=float))
            with np.errstate(divide="ignore", invalid="ignore"):
                decay = np.minimum(backlog_decay(stats, m_full, cap) * spread, np.where(p_u > 0, back_u / p_u, np.inf))
            longer = np.where(d == 1, backlog_feedback(decay, stats, p_u, q, m_full, cap, rate_it, slope, s_tok, dq,
                                                       prompt_scale, L), 1.0)
            back_u, decay = back_u * longer, np.where(ungated, decay * longer, np.inf)
            if engine.instance_dispatch == "fewest_tokens" and np.any(np.asarray(instances) > 1):
                # the instances' prompt queues pooled (one rank each; with attention DP the ranks'
                # own router decides inside an instance, not modelled as pooled)
                p_pool, back_pool = pooled_backlog(p_u, back_u, m_full * stats.isl_mean / cap, instances)
                p_u, back_u = np.where(d == 1, p_pool, p_u), np.where(d == 1, back_pool, back_u)
                decay = np.where(d == 1, np.inf, decay)  # a pooled queue's tail: its mean's exponential
            p_over = np.where(ungated, p_u, p_over)
            backlog = np.where(ungated, back_u, backlog)
            stable = np.where(ungated, stable_u, stable)
        if tail is None:
            *extra, behind = budget_wait(stats, m_rank, cap, p_over, backlog, stable,
                                         fit=None if engine.chunked_prefill else fit, split=True)
            extra = (*extra, full)
            if engine.chunked_prefill:
                # chunked, the last of a prompt's K extra iterations takes only what is left of it
                # (the rest past the budget, E[ISL²]/(2·E[ISL]) on average, against the busiest
                # rank's usual tokens) unless a backlog queues behind it (chance ``p_over``): one
                # full-budget iteration in K less per waiting prompt (des.simulate_engine, gate
                # off, chunked: d = 8 at 30 % mean TTFT +6.2 → +4.2 %, d = 1 at 30 / 60 % +4.1 /
                # +4.6 → +1.3 / +1.5 %; 4 seeds × 48,000 requests +6.9 → +4.8 %, +5.5 / +7.1 → +2.6 / +3.9 %)
                k_mean, k_var, p_k, _ = extra
                last = np.minimum(eg_b * t_d + s_tok * np.maximum(np.minimum(ov, cap) * prompt_scale, big_mean), full)
                with np.errstate(divide="ignore", invalid="ignore"):
                    share = np.where(k_mean > 0, np.minimum(p_k / k_mean, 1.0), 0.0)
                extra = (k_mean, k_var, p_k, full - share * (1.0 - p_over) * (full - last))
                if np.any(d == 1):  # applied where d = 1 (``_metrics``), elementwise over a grid
                    # one rank: the first context iteration takes at most one budget of the queue up to
                    # and including the prompt; the tokens past it are the K iterations' (above), so
                    # the admitting iteration's stall is that take, not the whole prompts' prefill
                    # (des.simulate_engine, Llama-3.1-405B prompts, 1,536-token budget, d = 1 at 30 /
                    # 60 / 90 %: mean TTFT +49 / +38 / +16 % while the prompt's tokens past its first
                    # chunk were priced twice)
                    def first(n_with):  # n_with: the prompts admitted with it
                        return s_tok * cap * prompt_scale * first_take(stats, n_with, cap, p_over, backlog, stable)
            # the prompts behind a carried backlog, apart: their TTFT keeps the backlog's exponential
            # tail (``_metrics``)
            kb_mean, kb_var, pb_wait, w_mean = behind
            extra = (*extra, (np.where(stable, p_over, 0.0), kb_mean, kb_var, pb_wait, np.minimum(w_mean, decay / cap)))
        else:
            # gated chunked: only the tokens ahead wait for context iterations (whole periods); a
            # started prompt's rest goes on in the next iteration (gate or not): the prompts that
            # straddle the budget (a rank's chance ``carried`` per period over its prompts per
            # period) wait that one iteration more
            x, px = np.asarray(stats.isl_points, dtype=float), np.asarray(stats.isl_probs, dtype=float)
            ov_var = float(np.sum(px * x**3) / (3.0 * np.sum(px * x))) - ov * ov  # forward recurrence
            k_mean, k_var, p_k = budget_wait(stats, m_rank, cap, p_over, backlog, stable, start=ov, start_var=ov_var,
                                             backlog_cv2=backlog_cv2)
            p_str = np.clip(carried / np.maximum(m_rank, 1e-30), 0.0, 1.0)
            k_mean = np.where(gated, k_mean + p_str * (t_d + s_tok * tail * prompt_scale) / full, k_mean)
            extra = (k_mean, k_var, np.maximum(p_k, np.where(gated, p_str, 0.0)), full)
    # the iteration that admits a tagged prompt carries it and the prompts that came during the
    # (length-biased) iteration or gate period it waited through: the busiest rank's tokens of that
    # count, which grow less than in proportion with it over d ranks (no chunked budget; d = 1 is
    # linear, the same as the mean stall per prompt times the count)
    tagged = None
    if not (budget and engine.chunked_prefill) and np.any(d > 1):
        def stall(n1):  # a whole-prompt budget caps each rank's take (``capped_tokens``)
            m1, dd = np.broadcast_arrays(n1 / d, d)
            tok = capped_tokens(stats, m1, cap, dd, engine.rank_router)[0] if budget else \
                busiest_tokens(stats, m1, dd, engine.rank_router)[0]
            return s_tok * prompt_scale * tok

        tagged = (d > 1, stall)
    res = _metrics(t_d, s_mean, s_sq, s_tok, big_var_a, eg, vg, batch, d, L, stats, q, None, g3, s_extra, extra, budget,
                   slope, quantiles, tagged, first, ctx_share)
    res.ok, res.reason = limits(engine, batch, d, stats, q, big_mean, big_var, dq)
    res.busiest_prompt_tokens = big_mean
    res.decode_rows = rows
    res.decode_slope = slope
    return res


BISECT_STEPS = 14
"""Steps of the gated-budget fixed point G = f(G) (bracket [1, T + W + 1] halved each step)."""


WAIT_HEAD_PERIODS = 4
"""Context iterations of a budget wait summed term by term; the rest of the sum is its integral."""


def _gamma_shape(mean, var):
    """Shape a and scale θ of the gamma of ``mean`` and ``var`` (floored away from 0)."""
    mean = np.maximum(mean, 1e-30)
    var = np.maximum(var, 1e-12 * mean * mean)
    return mean * mean / var, var / mean


def gammaincc(a, x):
    """The regularized upper incomplete gamma Q(a, x) (scipy.special, imported on first use: the
    Offline paths never need it, and the import is a third of a cold ``infersim run``)."""
    from scipy.special import gammaincc as q

    return q(a, x)


def _gamma_excess(a, th, t, q0=None):
    """E[(Z − t)⁺] of a gamma Z of shape ``a`` and scale ``th`` (regularized incomplete gammas;
    ``q0`` = P(Z > t) where the caller has it)."""
    q0 = gammaincc(a, t / th) if q0 is None else q0
    return np.maximum(a * th * gammaincc(a + 1.0, t / th) - t * q0, 0.0)


def _gamma_tail_sums(mean, var, head: int = WAIT_HEAD_PERIODS):
    """Σ_k P(Z > k) and Σ_k (2k − 1)·P(Z > k) over k ≥ 1 for a gamma Z of ``mean`` and ``var``:
    the first ``head`` terms exactly, beyond them the integrals from head + ½ (E[(Z − t)⁺] and
    E[(Z² − t²)⁺] − E[(Z − t)⁺], regularized incomplete gamma functions)."""
    a, th = _gamma_shape(mean, var)
    k = np.arange(1, head + 1, dtype=float)
    tail = gammaincc(a[..., None], k / th[..., None])
    t = head + 0.5
    q0, q2 = gammaincc(a, t / th), gammaincc(a + 2.0, t / th)
    over1 = _gamma_excess(a, th, t, q0)
    over2 = np.maximum(a * (a + 1.0) * th * th * q2 - t * t * q0, 0.0)
    return (np.sum(tail, axis=-1) + over1, np.sum((2.0 * k - 1.0) * tail, axis=-1) + over2 - over1, tail[..., 0])


def whole_prompt_budget(stats: WorkloadStats, free):
    """Prompt tokens a rank takes per context iteration from a free budget ``free`` when prompts
    are not chunked: a rank takes prompts in order while the next one fits, so an iteration that
    leaves some waiting leaves the budget's last gap unused, ``stats.prompt_overshoot`` on average
    once the budget holds a few prompts (floored at half the budget for budgets that do not)."""
    return np.maximum(free - stats.prompt_overshoot, 0.5 * free)


def _carried_budgets(backlog, p_over, stable, cap):
    """E[W | W > 0] in budgets: the mean backlog a prompt finds when it finds one (0 where unstable)."""
    return np.where(stable, backlog / np.maximum(p_over, 1e-12), 0.0) / cap


def _budget_z(stats: WorkloadStats, ahead, cap, p_over, backlog, stable, start=None, start_var=0.0, fit=None,
              backlog_cv2=1.0):
    """Mean and variance of Z = (W + A + P)/budget given W = 0 (over ``fit``, default ``cap``) and
    given W > 0 (over ``cap``): A the tokens of ``ahead`` prompts (compound Poisson), P the tagged
    prompt's (``start``/``start_var`` where it is a rest, else one prompt), W the rank's backlog
    (exponential of mean ``backlog``/``p_over`` when there is one)."""
    mu, m2 = stats.isl_mean, stats.isl_sq
    own, own_var = (mu, m2 - mu * mu) if start is None else (start, start_var)
    fit = cap if fit is None else fit
    tokens, tokens_var = ahead * mu + own, ahead * m2 + own_var
    wpos = _carried_budgets(backlog, p_over, stable, cap)
    return tokens / fit, tokens_var / fit**2, tokens / cap + wpos, tokens_var / cap**2 + backlog_cv2 * wpos * wpos


def budget_wait(stats: WorkloadStats, count, cap, p_over, backlog, stable, start=None, start_var=0.0, fit=None,
                backlog_cv2=1.0, split: bool = False):
    """Mean and variance of the context iterations a prompt waits beyond the first one after its
    arrival because its rank takes at most ``cap`` tokens per context iteration (a chunked prompt
    is prefilled over several; a whole one waits until it fits).

    Ahead of a tagged prompt of P tokens on its rank: the backlog W carried into the iteration
    (none with probability 1 − ``p_over``, else exponential of mean ``backlog``/``p_over``, the
    backlog of a discrete-time queue near its overflow) and the prompts that arrived before it
    since the last context iteration (half the period's, compound Poisson). With Z = (W + A + P)/c
    its last token is taken in context iteration ceil(Z): K = ceil(Z) − 1 more, E[K] = Σ_k P(Z > k),
    E[K²] = Σ_k (2k − 1)·P(Z > k), Z taken gamma given W = 0 and given W > 0; given W = 0 on the
    gated chunked path (``start`` the straddler's mean overshoot ov, ``cap`` the free budget plus
    ov: each missed admission takes a budget and the straddler's rest), K ≥ k ⟺ A + ov ≥ k·cap on
    the compound Poisson lattice itself (``_ahead_wait_sums``). Returns (E[K], Var[K], P(K ≥ 1)),
    With ``split``, a fourth item, the part behind a carried backlog (W > 0): (E[K | W > 0],
    Var[K | W > 0], P(K ≥ 1 | W > 0), E[W | W > 0] in budgets), the exponential whose tail the
    TTFT's quantiles keep (``_metrics``)."""
    mean0, var0, mean1, var1 = _budget_z(stats, 0.5 * count, cap, p_over, backlog, stable, start, start_var, fit,
                                         backlog_cv2)
    # both cases in one pass (a leading axis: W = 0, W > 0)
    mean0, mean1, var0, var1 = np.broadcast_arrays(mean0, mean1, var0, var1)
    (s0, s1), (s0sq, s1sq), (p0, p1) = _gamma_tail_sums(np.stack((mean0, mean1)), np.stack((var0, var1)))
    if start is not None:  # the gated chunked start: without a backlog, A's own lattice tail
        e0, e0sq, q0 = _ahead_wait_sums(stats, 0.5 * count, cap, start)
        have = np.isfinite(e0)
        s0, s0sq, p0 = (np.where(have, a, b) for a, b in ((e0, s0), (e0sq, s0sq), (q0, p0)))
    e1 = (1.0 - p_over) * s0 + p_over * s1
    e2 = (1.0 - p_over) * s0sq + p_over * s1sq
    p_carried = p1
    p1 = np.where(stable, (1.0 - p_over) * p0 + p_over * p1, 1.0)
    out = np.where(stable, e1, np.inf), np.where(stable, np.maximum(e2 - e1 * e1, 0.0), np.inf), p1
    if not split:
        return out
    return out + ((s1, np.maximum(s1sq - s1 * s1, 0.0), p_carried, _carried_budgets(backlog, p_over, stable, cap)),)


def _ahead_wait_sums(stats: WorkloadStats, ahead, cap, own):
    """Σ_k P(K ≥ k), Σ_k (2k − 1)·P(K ≥ k) and P(K ≥ 1) for K ≥ k ⟺ A + ``own`` ≥ k·``cap``, A the
    exact compound Poisson prompt tokens of ``ahead`` prompts (``_cp_table``'s lattice, its counts
    interpolated in log count), where ``ahead`` lies on the table's count axis; NaN elsewhere (the
    caller keeps its gamma there). The gamma fitted to A's mean and variance puts mass where a few
    whole prompts cannot: with half a prompt ahead on average (60 % of the prompts find none) it
    gives P(K ≥ 1) 0.087 against the lattice's 0.069 (Llama-2 prompts, 500-token budget)."""
    grid, (step, _), cdf, _, _ = _cp_table(tuple(stats.isl_points), tuple(stats.isl_probs))
    ms = COUNT_AXIS[COUNT_AXIS <= FFT_MAX_COUNT]
    ahead, cap, own = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in (ahead, cap, own)))
    nan = np.full(ahead.shape, np.nan)
    ok = (ahead >= ms[0]) & (ahead <= ms[-1]) & (cap > 0)
    if not np.any(ok):
        return nan, nan.copy(), nan.copy()
    lm = np.log(ms)
    x = np.log(ahead[ok])
    i = np.clip(np.searchsorted(lm, x) - 1, 0, len(lm) - 2)
    f = ((x - lm[i]) / (lm[i + 1] - lm[i]))[:, None]
    # every k whose threshold lies inside the lattice, plus one (beyond it the tail is 0)
    kmax = int(np.ceil(float(np.max((grid[-1] + own[ok]) / cap[ok])))) + 1
    k = np.arange(1, kmax + 1, dtype=float)
    pos = np.clip((k * cap[ok][:, None] - own[ok][:, None]) / step, 0.0, grid.size - 1.0)
    j = np.minimum(pos.astype(int), grid.size - 2)
    u = pos - j

    def below(row):  # P(A < t) on the lattice rows ``row``, linear between lattice points
        r = row[:, None]
        return cdf[r, j] * (1.0 - u) + cdf[r, j + 1] * u

    tail = np.clip(1.0 - ((1.0 - f) * below(i) + f * below(i + 1)), 0.0, 1.0)
    s, s2, p = nan.copy(), nan.copy(), nan.copy()
    s[ok], s2[ok], p[ok] = tail.sum(-1), ((2.0 * k - 1.0) * tail).sum(-1), tail[:, 0]
    return s, s2, p


def first_take(stats: WorkloadStats, count, cap, p_over, backlog, stable):
    """E[min(Z, 1)], Z = (W + A + P)/``cap`` (chunked budget, no gate): the share of the budget that
    the tagged prompt's first context iteration prefills, at most one budget of the backlog W, the
    prompts A that are admitted with it (``count`` of them: those of its length-biased period,
    before and after it, as in the unbudgeted stall s + ρ·C*) and its own P; the tokens past it
    are prefilled in the K iterations after it (``budget_wait``). E[min(Z, 1)] = E[Z] − E[(Z − 1)⁺],
    Z gamma given W = 0 and given W > 0."""
    mean0, var0, mean1, var1 = _budget_z(stats, count, cap, p_over, backlog, stable)

    def below_one(mean, var):
        return mean - _gamma_excess(*_gamma_shape(mean, var), 1.0)

    return (1.0 - p_over) * below_one(mean0, var0) + p_over * below_one(mean1, var1)


def _uniform_gamma_quantiles(parts, qs, start, iters: int = 12) -> list:
    """Quantiles of a mixture of U·a + Y (U uniform on [0, 1], Y gamma of mean m and variance v
    independent; a = 0: Y alone), parts = [(weight, a, m, v), ...] of equal-shaped arrays. The
    CDF of U·a + Y is (G(t) − G(t − a))/a with G(x) = E[(x − Y)⁺] = x·F(x; k) − kθ·F(x; k + 1)
    (gamma CDFs of shape k, k + 1 and scale θ, Wilson-Hilferty), its density (F(t) − F(t − a))/a;
    each quantile by safeguarded Newton steps from ``start`` (one array per q) inside [0, hi]."""
    # per part: the Wilson-Hilferty terms of the gamma CDFs of shape k and k + 1 (scale θ)
    prep, hi = [], 0.0
    for w, a, m, v in parts:
        k, th = m * m / v, v / m
        k1 = k + 1.0
        prep.append((w, a, k * th, gamma_cdf_terms(k * th, k * th * th), gamma_cdf_terms(k1 * th, k1 * th * th)))
        hi = np.maximum(hi, a + m + 40.0 * np.sqrt(v))
    total = sum(w for w, *_ in prep)

    def g(x, kth, f0, f1):  # E[(x − Y)⁺] = x·F(x; k) − kθ·F(x; k + 1)
        x = np.maximum(x, 0.0)
        return x * gamma_cdf_at(x, f0) - kth * gamma_cdf_at(x, f1)

    def cdf_pdf(t):
        # each gamma CDF evaluated once per point (F(t; k) serves G, F and the density alike)
        c = d = 0.0
        x = np.maximum(t, 0.0)
        for w, a, kth, f0, f1 in prep:
            uni = a > 0
            ft = gamma_cdf_at(t, f0)
            if np.all(uni):
                # the uniform mixture: CDF (G(t) − G(t − a))/a, density (F(t) − F(t − a))/a
                xa = np.maximum(t - a, 0.0)
                fa = gamma_cdf_at(t - a, f0)
                g_t = x * ft - kth * gamma_cdf_at(x, f1)
                g_a = xa * fa - kth * gamma_cdf_at(xa, f1)
                c = c + w * ((g_t - g_a) / a)
                d = d + w * ((ft - fa) / a)
            elif not np.any(uni):
                # a gamma alone: its CDF, the density by a small central difference
                eps = 1e-4 * np.maximum(t, 1e-12)
                c = c + w * ft
                d = d + w * ((gamma_cdf_at(t + eps, f0) - gamma_cdf_at(t - eps, f0)) / (2 * eps))
            else:
                aa = np.where(uni, a, 1.0)
                c = c + w * np.where(uni, (g(t, kth, f0, f1) - g(t - a, kth, f0, f1)) / aa, ft)
                eps = 1e-4 * np.maximum(t, 1e-12)
                pdf = np.where(uni, (ft - gamma_cdf_at(t - a, f0)) / aa,
                               (gamma_cdf_at(t + eps, f0) - gamma_cdf_at(t - eps, f0)) / (2 * eps))
                d = d + w * pdf
        return c / total, d / total

    # every q in one pass: a leading axis, one layer per q
    starts = np.broadcast_arrays(*(np.asarray(t0, dtype=float) for t0 in start))
    q = np.reshape(np.asarray(qs, dtype=float), (len(qs),) + (1,) * starts[0].ndim)
    t = np.clip(np.stack(starts), 0.0, hi)
    lo, up = np.zeros_like(t), np.broadcast_to(hi, t.shape).copy()
    for _ in range(iters):
        c, d = cdf_pdf(t)
        below = c < q
        lo, up = np.where(below, t, lo), np.where(below, up, t)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # a flat CDF: bisection takes over
            newton = t - (c - q) / d
        t, stay = newton_or_bisect(t, newton, lo, up, 0.5 * (lo + up))  # a point at its root stays
        if np.all(stay | ~np.isfinite(t)):  # every point at its root
            break
    return [t[i] for i in range(len(qs))]


def _metrics(t_d, s_mean, s_sq, s_tok, big_var, eg, vg, batch, d, L, stats: WorkloadStats, q, cost, g3=0.0,
             s_extra=None, budget_wait=None, capped: bool = False, slope=0.0, quantiles: bool = True,
             tagged=None, first=None, admit_share=1.0) -> EngineResult:
    """Period moments → rate, TTFT and TPOT (reduces to ``serving.queue_metrics`` for d = 1, G = 1).
    ``quantiles`` False: the means only (the percentiles and the end-to-end p99 are NaN).
    ``tagged`` = (where, stall): at the points ``where``, the iteration that admits a tagged prompt
    stalls ``stall(n)`` for the n prompts it carries (elsewhere the mean stall per prompt times n).
    ``first(n)``: with a chunked budget, the prefill of the tagged prompt's first context iteration
    when n prompts are admitted with it (one budget at most), in place of the whole prompts' stall.
    ``admit_share``: the admitting iteration's share of the period's prompt stall, below 1 gated
    with a chunked budget (the straddling prompts' rests are prefilled in the iteration after it)."""
    one = np.all(np.asarray(d) == 1) and np.all(np.asarray(eg) == 1.0) and np.all(np.asarray(vg) == 0.0)
    ca2 = np.asarray(stats.arrival_scv, dtype=float)
    renewal = bool(np.any(ca2 != 1.0))
    rate = request_rate(batch, t_d, s_mean, L, stats)
    rho = rate * s_mean
    c_mean = eg * t_d / (1.0 - rho)
    # renewal arrivals: count variance c_a² × mean (serving.queue_metrics); d > 1 via big_var
    s_sq_count = s_sq + (ca2 - 1.0) * s_mean * s_mean if renewal else s_sq
    vx_whole = rate * c_mean * s_sq_count  # whole prompts arriving over a period (compound Poisson)
    if capped:  # a token budget caps each rank's prompt tokens per context iteration (any d)
        vx = s_tok * s_tok * big_var
    elif one:
        vx = vx_whole
    else:
        vx = np.where(d > 1, s_tok * s_tok * big_var, vx_whole)

    def period_var(v):  # the period's variance from its stall variance v
        return (t_d * t_d * vg + v) / (1.0 - rho * rho)

    c_var = period_var(vx)
    c_sq = c_var + c_mean**2
    k = c_mean**2 / np.maximum(c_var, 1e-30 * c_mean**2)
    theta = c_mean / k
    c_cube = theta**3 * k * (k + 1) * (k + 2)
    if np.any(vg > 0):
        # gated: the iteration count is bounded by the timeout, so skew the period by its parts,
        # the gate's own third moment and a gamma-shaped stall X, rather than by one gamma fit
        x_mean = np.maximum(c_mean - eg * t_d, 1e-30)
        x_var = np.maximum(c_var - t_d * t_d * vg, 0.0)
        mu3 = t_d**3 * g3 + 2.0 * x_var**2 / x_mean
        c_cube = np.where(vg > 0, c_mean**3 + 3.0 * c_mean * c_var + mu3, c_cube)
    c_star = c_sq / c_mean
    c_star_var = np.maximum(c_cube / c_mean - c_star**2, 0.0)
    s_var = np.maximum(s_sq - s_mean**2, 0.0)
    idle = np.exp(-np.asarray(batch, dtype=float))
    busy = 1.0 - idle
    # renewal arrivals: the requests that arrive together with a tagged one number e_n more than
    # Poisson's λ·E[C*] on average (``serving.palm_excess``: > 0 bursty, < 0 smooth, never below
    # −λ·E[C*]); they enter where the co-arrivals are counted
    e_n, v_n = palm_excess(ca2, rate * c_star) if renewal else (0.0, 0.0)
    s_extra = s_mean if s_extra is None else s_extra
    # the prompts admitted with it stall their iteration; gated chunked only for its share of the
    # period's prompt tokens: the rests of the prompts that straddle the budget come in the next
    # iteration, which only those prompts wait for (their budget wait, ``engine_queue``)
    b_mean = 0.5 * c_star + t_d + s_mean * admit_share + rho * c_star * admit_share
    if renewal:
        b_mean = b_mean + e_n * s_extra
    one_rank = np.asarray(d) == 1
    if first is not None:  # chunked, one rank: the admitting iteration prefills one take, the K after it the rest
        co = np.maximum(rate * c_star / d + e_n, 0.0) if renewal else rate * c_star / d
        b_mean = np.where(one_rank, 0.5 * c_star + t_d + first(co), b_mean)
    if tagged is not None:  # the admitting iteration's stall from its prompt count (``engine_queue``)
        where, stall = tagged
        co = np.maximum(rate * c_star + e_n, 0.0) if renewal else rate * c_star
        b_mean = np.where(where, 0.5 * c_star + t_d + stall(1.0 + co), b_mean)
    if one:
        x_next_var = s_var + rate * s_sq * c_star
    else:
        x_next_var = np.where(d > 1, s_tok * s_tok * big_var * c_star / c_mean + s_var / d, s_var + rate * s_sq * c_star)
    b_var = c_cube / c_mean / 12.0 + x_next_var + (0.5 + rho) ** 2 * c_star_var
    if renewal:  # a count's variance is never below zero: Var = λ·E[C*] + v_n ≥ 0
        b_var = np.maximum(b_var + e_n * s_var + np.where(d > 1, 0.0, v_n * s_mean * s_mean), 0.0)
    i_mean = t_d + s_mean
    if budget_wait is None:
        p_wait = 0.0  # no budget: every prompt is prefilled in its first context iteration
        ttft_mean = busy * b_mean + idle * i_mean
        comps = [(busy, b_mean, b_var), (idle, i_mean, s_var)]
    else:
        # K more context iterations waited for the rank's token budget: the prompts served in their
        # first context iteration (and an idle engine's) and those that wait, one gamma each
        k_mean, k_var, p_wait, c_full = budget_wait[:4]
        with np.errstate(divide="ignore", invalid="ignore"):
            k1 = np.where(p_wait > 0, k_mean / np.maximum(p_wait, 1e-300), 1.0)
            k1_var = np.maximum((k_var + k_mean**2) / np.maximum(p_wait, 1e-300) - k1 * k1, 0.0)
        w0, w1 = busy * (1.0 - p_wait) + idle, busy * p_wait
        m0 = (busy * (1.0 - p_wait) * b_mean + idle * i_mean) / np.maximum(w0, 1e-300)
        m1, v1 = b_mean + k1 * c_full, b_var + k1_var * c_full * c_full
        ttft_mean = busy * (b_mean + k_mean * c_full) + idle * i_mean
        comps = [(w0, m0, b_var), (w1, m1, v1)]
    it_mean = c_mean / eg
    tpot_mean = it_mean / L
    if not quantiles:
        nan = np.full(np.shape(tpot_mean + ttft_mean), np.nan)
        return EngineResult(tokens_per_s=rate * stats.osl_mean, rate=rate, ttft_mean=ttft_mean, ttft_p99=nan,
                            tpot_mean=tpot_mean, tpot_p99=nan, e2e_p99=nan, step=cost, prefill_share=rho,
                            iteration_s=it_mean, decode_iteration_s=t_d + 0.0 * it_mean, gate_iters=eg + 0.0 * it_mean,
                            ttft_p50=nan, tpot_p50=tpot_mean)
    ttft_p, ttft_p50 = _two_gamma_quantiles(*comps[0], *comps[1], (q, 0.5))
    if budget_wait is not None and len(budget_wait) > 4:  # the median stays the two gammas' (its body)
        ttft_p = _carried_quantile(budget_wait, busy, idle, b_mean, b_var, i_mean, s_var, q, ttft_p)
    gated = np.broadcast_to((np.asarray(vg) > 0) | (np.asarray(eg) > 1), np.shape(ttft_p))
    if np.any(gated):
        # gated (or multi-step: a fixed period of E[G] iterations): a prompt waits for the next
        # context iteration, uniformly over a period that the timeout bounds (not a gamma's tail): each component is U·C* + a gamma of the rest, C* the
        # mean length-biased period; the idle engine's component is a gamma alone
        sel = np.nonzero(gated)
        pick = lambda a: np.broadcast_to(a, gated.shape)[sel]  # noqa: E731
        width = pick(c_star)
        parts = []
        for i, (w, m, v) in enumerate(comps):
            u = width if i == 0 or budget_wait is not None else 0.0 * width
            parts.append((pick(w), u, np.maximum(pick(m) - 0.5 * u, 1e-30), np.maximum(pick(v) - u * u / 12.0, 1e-6 * pick(v))))
        ttft_p, ttft_p50 = np.array(ttft_p, dtype=float), np.array(ttft_p50, dtype=float)
        ttft_p[sel], ttft_p50[sel] = _uniform_gamma_quantiles(parts, (q, 0.5), (ttft_p[sel], ttft_p50[sel]))
    # variance per iteration of a long run: the stalls' variance and the count of context iterations
    x_mean = c_mean - eg * t_d
    c_var_w = c_var
    if first is not None:
        # chunked: a prompt's chunks land in consecutive iterations, so over a request's window the
        # prefill varies with the whole prompts that arrive in it (compound Poisson of S), not with
        # the per-iteration take (near one budget every context iteration when prompts are long)
        c_var_w = np.where(one_rank, period_var(vx_whole), c_var)
    c_var_it = (np.maximum(c_var_w - t_d * t_d * vg, 0.0) + (x_mean / eg) ** 2 * vg) / eg
    n_it = np.maximum(stats.osl_points / L - 1.0, 1.0)
    amplitude = np.sqrt(np.maximum(c_var_it, 0.0) * (1 + rho) / (1 - rho)) / L
    fast = amplitude * mixture_z(np.sqrt(n_it), stats.osl_probs, q)
    # the decode count's drift over a request's window (serving.decode_drift), per iteration
    # a prompt's stall gathers more arrivals only where the budget takes it at once: a prompt that
    # waits for the budget lengthens no iteration (decode_drift's clusters, mean ρ·(1 − P(wait)))
    a_s, z_s, sd99 = decode_drift(slope / (1.0 - rho), batch, t_d, L, stats, q, rho * (1.0 - p_wait))
    tpot_p = tpot_mean + np.sqrt(fast * fast + (a_s * z_s) ** 2)
    tpot_p50 = tpot_mean  # the normal mixture is symmetric about the mean
    n99 = stats.osl_p99 / L
    e2e = ttft_p + n99 * it_mean + NormalDist().inv_cdf(q) * np.sqrt(
        n99 * np.maximum(c_var_it, 0.0) * (1 + rho) / (1 - rho) + (n99 * sd99) ** 2)
    return EngineResult(tokens_per_s=rate * stats.osl_mean, rate=rate, ttft_mean=ttft_mean, ttft_p99=ttft_p,
                        tpot_mean=tpot_mean, tpot_p99=tpot_p, e2e_p99=e2e, step=cost, prefill_share=rho,
                        iteration_s=it_mean, decode_iteration_s=t_d + 0.0 * it_mean, gate_iters=eg + 0.0 * it_mean,
                        ttft_p50=ttft_p50, tpot_p50=tpot_p50)


def _carried_quantile(budget_wait, busy, idle, b_mean, b_var, i_mean, s_var, q: float, two_gamma):
    """TTFT quantiles with the prompts behind a carried backlog apart (``budget_wait``'s fifth item):
    their K extra context iterations are the backlog W's (exponential: the Cramér-Lundberg tail of
    the rank's prompt queue, ``_lindley_backlog``) plus the tokens ahead and their own, so their TTFT
    is a gamma plus an exponential of mean c·E[W | W > 0] rather than one gamma of its two moments,
    whose tail decays at the gamma's scale (des.simulate_engine, one rank, chunked 512-token budget
    at 90 % load: p99 TTFT −21 % with one gamma, 8 seeds × 48,000 requests). The others (no backlog:
    K = 0, or K ≥ 1 from the prompts ahead) and an idle engine's stay the two gammas of before.
    Returns ``two_gamma`` where no prompt finds a backlog."""
    k_mean, k_var, p_wait, c_full, (p_b, kb_mean, kb_var, pb_wait, w_mean) = budget_wait
    p_b = np.asarray(p_b, dtype=float)
    use = np.broadcast_to((p_b > 0) & np.isfinite(k_mean) & (w_mean > 0), np.shape(two_gamma))
    if not np.any(use):
        return two_gamma
    sel = np.nonzero(use)
    pick = lambda a: np.broadcast_to(np.asarray(a, dtype=float), use.shape)[sel]  # noqa: E731
    pb, kbm, kbv, pbw, wm = (pick(a) for a in (p_b, kb_mean, kb_var, pb_wait, w_mean))
    km, kv, pw, c = (pick(a) for a in (k_mean, k_var, p_wait, c_full))
    bu, idl, bm, bv, im, sv = (pick(a) for a in (busy, idle, b_mean, b_var, i_mean, s_var))
    # without a backlog (chance 1 − p_b): K's moments and P(K ≥ 1) by difference
    rest = np.maximum(1.0 - pb, 1e-12)
    k0 = np.maximum(km - pb * kbm, 0.0) / rest
    k0sq = np.maximum(kv + km * km - pb * (kbv + kbm * kbm), 0.0) / rest
    p0 = np.clip((pw - pb * pbw) / rest, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        k01 = np.where(p0 > 1e-12, k0 / np.maximum(p0, 1e-300), 1.0)
        k01v = np.where(p0 > 1e-12, np.maximum(k0sq / np.maximum(p0, 1e-300) - k01 * k01, 0.0), 0.0)
    w_none = bu * rest * (1.0 - p0) + idl
    m_none = (bu * rest * (1.0 - p0) * bm + idl * im) / np.maximum(w_none, 1e-300)
    # behind a backlog: a gamma Y plus an exponential E of mean c·E[W | W > 0] (at most what the
    # component's own mean and variance leave for it)
    m_b, v_b = bm + kbm * c, bv + kbv * c * c
    tau = np.minimum(c * wm, np.minimum(0.95 * m_b, np.sqrt(0.95 * v_b)))
    parts = [(w_none, m_none, bv, 0.0 * tau), (bu * rest * p0, bm + k01 * c, bv + k01v * c * c, 0.0 * tau),
             (bu * pb, m_b, v_b, tau)]
    res = np.array(np.broadcast_to(two_gamma, use.shape), dtype=float)
    res[sel] = _mixture_quantile(parts, q, pick(two_gamma))
    return res


def _gamma_exp_survival(t, m, v, tau):
    """P(Y + E > t) and its density, Y gamma of mean m − τ and variance v − τ², E exponential of
    mean τ (τ = 0: the gamma of m and v alone): S = Q(k, t/θ) + e^(−t/τ)·(1 − θ/τ)^(−k)·P(k, t·(1 −
    θ/τ)/θ), the second term E[e^((Y − t)/τ); Y ≤ t] by tilting the gamma, and the density (S − Q)/τ;
    where θ ≥ τ (the gamma's own tail the longer) the gamma of m and v."""
    from scipy.special import gammainc, gammaln

    has = tau > 0
    my = np.where(has, m - tau, m)
    vy = np.where(has, np.maximum(v - tau * tau, 1e-12 * my * my), v)
    k, th = _gamma_shape(my, vy)
    r = np.where(has, th / np.maximum(tau, 1e-300), 1.0)
    tilt = r < 0.999
    k_whole, th_whole = _gamma_shape(m, v)
    k, th = np.where(tilt, k, k_whole), np.where(tilt, th, th_whole)
    x = np.maximum(t, 1e-300) / th
    q = gammaincc(k, x)
    dens = np.exp((k - 1.0) * np.log(x) - x - gammaln(k)) / th
    if not np.any(tilt):
        return q, dens
    rr = np.minimum(r, 0.999)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        log_w = -t / np.maximum(tau, 1e-300) - k * np.log1p(-rr)
        extra = np.nan_to_num(np.exp(np.minimum(log_w, 700.0)) * gammainc(k, x * (1.0 - rr)))
    extra = np.where(tilt, extra, 0.0)
    return np.clip(q + extra, 0.0, 1.0), np.where(tilt, extra / np.maximum(tau, 1e-300), dens)


def _mixture_quantile(parts, q: float, start, iters: int = 10):
    """The q-quantile of a mixture of gamma-plus-exponential components, parts = [(weight, mean,
    variance, τ), ...] (``_gamma_exp_survival``): Newton from ``start`` (a first estimate),
    safeguarded by the bracket its own iterates establish (``serving.newton_or_bisect``)."""
    total = np.maximum(sum(np.asarray(w, dtype=float) for w, *_ in parts), 1e-300)

    def excess(t):  # P(T > t) − (1 − q) and the density
        sf, dens = 0.0, 0.0
        for w, m, v, tau in parts:
            a, b = _gamma_exp_survival(t, m, v, tau)
            sf, dens = sf + w * a, dens + w * b
        return sf / total - (1.0 - q), dens / total

    t = np.maximum(np.asarray(start, dtype=float), 1e-9)
    lo, hi = np.zeros_like(t), np.full_like(t, np.inf)
    for _ in range(iters):
        f, dens = excess(t)
        lo, hi = np.where(f > 0.0, t, lo), np.where(f > 0.0, hi, t)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = t + f / np.maximum(dens, 1e-300)
        # outside the bracket: halve it, or double t while no upper end is known; a point at its
        # root stays (each point's own iterates decide: a point priced alone equals it in a grid)
        t, stay = newton_or_bisect(t, step, lo, hi, np.where(np.isfinite(hi), 0.5 * (lo + hi), 2.0 * t))
        if np.all(stay):
            break
    return t


def limits(e, batch, d, stats: WorkloadStats, q: float, big_mean=None, big_var=None, dq: float = 1.0):
    """Engine limits as a mask and reason codes: batch cap per rank, token budget per iteration."""
    b = np.asarray(batch, dtype=float) / d
    shape = np.broadcast(b, big_mean if big_mean is not None else 0.0).shape
    ok = np.ones(shape, dtype=bool)
    reason = np.zeros(shape, dtype=np.int8)
    if e.max_batch_size is not None:
        cap = float(e.max_batch_size)
        # the chance a rank is full (Poisson occupancy) stays below 1 − q; under the balanced router
        # a request waits for a slot only when every rank is full (the router fills any rank below
        # the level), the instance's Poisson(B) count at d × the cap
        full = 1.0 - _poisson_cdf(cap - 1.0, b)
        if e.rank_router == "balanced":
            dd = np.broadcast_to(np.asarray(d, dtype=float), np.shape(b))
            full = np.where(dd > 1, 1.0 - _poisson_cdf(dd * cap - 1.0, b * dd), full)
        ok, reason = require(ok, reason, (b <= cap) & (full <= 1.0 - q), Reason.BATCH_LIMIT)
    if e.max_num_tokens is not None:
        free = e.max_num_tokens - b * dq
        if e.chunked_prefill:
            # prompt tokens arriving per iteration must stay below the free budget (else the
            # prefill queue grows without bound)
            per_iter_tokens = b * stats.isl_mean / stats.osl_mean
            fits = per_iter_tokens < free
            if e.gate_timeout_iters > 0:
                # gated, a rank starts prompts only at context iterations, at most every W + 1
                # iterations once every rank has a waiting prompt, taking its free budget plus the
                # rest of the prompt it started (mean E[ISL²]/(2·E[ISL])): beyond that the queue
                # grows (des.simulate_engine, 9/3 chunked: 653 tokens per rank per period at
                # saturation, free budget 447 + rest 193)
                drain = free + stats.prompt_overshoot
                fits = fits & ((np.asarray(d) <= 1) | (per_iter_tokens * (1.0 + e.gate_wait_iters) < drain))
        else:
            # the longest prompt must fit beside the rank's decode tokens (else it blocks its rank,
            # FCFS), and prompt tokens must arrive slower than one free budget per iteration;
            # prompts that together overflow a context iteration only wait for the next one
            # (multi-step: the prompts of ``decode_steps`` iterations come in one context iteration),
            # less the budget's last gap that whole prompts leave unused (``engine_queue``)
            fits = (stats.isl_max <= free) & (b * stats.isl_mean / stats.osl_mean * admission_period(e)
                                              < whole_prompt_budget(stats, free))
        ok, reason = require(ok, reason, fits, Reason.TOKEN_BUDGET)
    return ok, reason


def offline_limits(plan: Plan, layout: Layout, batch, stats: WorkloadStats):
    """Offline: the batch cap per rank and the per-rank tokens of a steady-state step within budget."""
    e = plan.engine
    d = np.asarray(layout.dp, dtype=float)
    b = np.asarray(batch, dtype=float) / d
    ok = np.ones(np.broadcast(b, d).shape, dtype=bool)
    reason = np.zeros(ok.shape, dtype=np.int8)
    if e.max_batch_size is not None:
        ok, reason = require(ok, reason, b <= e.max_batch_size, Reason.BATCH_LIMIT)
    if e.max_num_tokens is not None:
        dq = 1.0 + plan.serving.draft_depth
        prompt = b * plan.serving.tokens_per_step / stats.osl_mean * stats.isl_mean
        fits = b * dq + prompt <= e.max_num_tokens
        if not e.chunked_prefill:
            fits &= b * dq + stats.isl_max <= e.max_num_tokens
        ok, reason = require(ok, reason, fits, Reason.TOKEN_BUDGET)
    return ok, reason


def offline_batch_bound(plan: Plan, layout: Layout, stats: WorkloadStats) -> float:
    """The largest batch per instance ``offline_limits`` allows (inf without a cap or a budget):
    both limits are linear in the batch."""
    e = plan.engine
    d = float(np.asarray(layout.dp, dtype=float))
    bound = np.inf if e.max_batch_size is None else float(e.max_batch_size)
    if e.max_num_tokens is not None:
        dq = 1.0 + plan.serving.draft_depth
        bound = min(bound, e.max_num_tokens / (dq + plan.serving.tokens_per_step / stats.osl_mean * stats.isl_mean))
        if not e.chunked_prefill:
            bound = min(bound, (e.max_num_tokens - stats.isl_max) / dq)
    return bound * d


# ---- prediction at a given load ---------------------------------------------------------------------

def at_rate(plan: Plan, layout: Layout, rate, stats: WorkloadStats, percentile: float, workers, b_max,
            n_grid: int = 240) -> tuple[EngineResult, np.ndarray, np.ndarray]:
    """The engine at arrival rate ``rate`` per instance: the occupancy B with λ(B) = rate.

    Returns (result at B, B, saturated): λ(B) is evaluated on a geometric occupancy axis up to
    ``b_max`` (KV capacity; the batch cap per rank × d where lower), B interpolated in log B on its
    rising part and the engine re-evaluated there. ``saturated`` where no B ≤ b_max reaches the rate.
    """
    b_max = float(b_max)
    axis = np.geomspace(1e-3, max(b_max, 1e-3), n_grid)
    r = server(plan, layout, axis, stats, percentile, workers)
    lam = np.where(np.isfinite(r.rate) & (r.prefill_share < 1), r.rate, 0.0)
    top = int(np.argmax(lam))
    saturated = np.asarray(rate > lam[top])
    rising = np.maximum.accumulate(lam[: top + 1])
    target = min(rate, lam[top])
    b = float(np.exp(np.interp(target, rising, np.log(axis[: top + 1]))))
    at = server(plan, layout, np.array([b]), stats, percentile, workers)
    # the interpolation in log B is exact only at the axis points: a few regula falsi steps (Illinois)
    # on λ(B) inside the axis cell that brackets the rate put B where λ(B) is the rate, so a capacity's
    # own rate gives back its placed batch (its limits to 1e-9, not 0.1 % off)
    k = int(np.searchsorted(rising, target))
    if 0 < k <= top and rising[k - 1] < target < rising[k] and lam[k - 1] == rising[k - 1] and lam[k] == rising[k]:
        lo, hi, f_lo, f_hi = np.log(axis[k - 1]), np.log(axis[k]), lam[k - 1] - target, lam[k] - target
        side = 0
        for _ in range(RATE_STEPS):
            f = _rate_of(at) - target
            if not np.isfinite(f) or abs(f) <= RATE_RTOL * target:
                break
            x = np.log(b)
            if f < 0:
                lo, f_lo = x, f
                f_hi = f_hi * 0.5 if side == -1 else f_hi
                side = -1
            else:
                hi, f_hi = x, f
                f_lo = f_lo * 0.5 if side == 1 else f_lo
                side = 1
            b = float(np.exp(lo - f_lo * (hi - lo) / (f_hi - f_lo)))
            at = server(plan, layout, np.array([b]), stats, percentile, workers)
    return at, np.array(b), saturated


RATE_STEPS = 8
"""Regula falsi steps of ``at_rate``'s occupancy at a given rate (each one engine evaluation)."""
RATE_RTOL = 1e-7
"""``at_rate`` stops where λ(B) is within this share of the rate."""


def _rate_of(res) -> float:
    """The arrival rate an engine result at one occupancy sustains (0 where not finite or all prefill)."""
    rate, share = float(np.ravel(res.rate)[0]), float(np.ravel(res.prefill_share)[0])
    return rate if np.isfinite(rate) and share < 1 else 0.0


MIN_DURATION_S = 600.0
"""LoadGen's minimum Server run (mlperf.conf ``*.Server.min_duration`` 600,000 ms;
shared/reference/mlperf_benchmarks.md section 1): the issue time when the query count is not given."""


def operating_point(plan: Plan, layout: Layout, replicas: int, stats: WorkloadStats, scenario, qps: float, b_max,
                    workers, samples: float | None = None) -> tuple[bool, str, dict]:
    """Prediction at ``qps`` requests/s for the whole system (spread evenly over ``replicas``):
    (meets every limit, the first broken limit's reason name or '', metrics).

    Rates: ``tokens_per_s`` is the steady state, qps × mean OSL (what enters a stable engine leaves
    it); ``completed_tokens_per_s`` is LoadGen's figure, the tokens of the issued queries over the
    issue time plus the last query's latency: steady × issue / (issue + latency), issue =
    ``samples`` / qps (default the 600 s minimum run), latency = mean TTFT + (OSL − 1) × mean TPOT."""
    slo = scenario.slo
    q = slo.percentile
    cap = plan.engine.max_batch_size
    d = float(np.asarray(layout.dp))
    limit = min(float(b_max), cap * d) if cap is not None else float(b_max)
    res, b, saturated = at_rate(plan, layout, qps / replicas, stats, q, workers, limit)
    pick = lambda a: float(np.ravel(a)[0])  # noqa: E731
    m = {"requests_per_s": qps, "tokens_per_s": qps * stats.osl_mean, "occupancy": pick(b) * replicas,
         "occupancy_per_instance": pick(b), "occupancy_per_rank": pick(b) / d, "iteration_s": pick(res.iteration_s),
         "decode_iteration_s": pick(res.decode_iteration_s), "gate_iters": pick(res.gate_iters),
         "ttft_p50_s": pick(res.ttft_p50), "ttft_s": pick(res.ttft_p99), "ttft_mean_s": pick(res.ttft_mean),
         "tpot_p50_s": pick(res.tpot_p50), "tpot_s": pick(res.tpot_p99), "tpot_mean_s": pick(res.tpot_mean),
         "prefill_share": pick(res.prefill_share)}
    loadgen_rates(m, stats, qps, samples)
    if bool(saturated):
        why = "BATCH_LIMIT" if cap is not None and cap * d <= float(b_max) else "SATURATED"
    elif not bool(np.ravel(res.ok)[0]):
        why = Reason(int(np.ravel(res.reason)[0])).name
    else:
        why = broken_limit(slo, m["ttft_s"], m["tpot_s"])
    return why == "", why, m


def loadgen_rates(m: dict, stats: WorkloadStats, qps: float, samples: float | None) -> dict:
    """``m`` (an operating point's metrics with ``tokens_per_s`` and the mean TTFT / TPOT) with the
    mean latency, LoadGen's issue time and its completed rate (``operating_point``); 0 completed
    where the latency is not finite."""
    latency = m["ttft_mean_s"] + (stats.osl_mean - 1.0) * m["tpot_mean_s"]
    issue = samples / qps if samples else MIN_DURATION_S
    m.update(mean_latency_s=latency, issue_s=issue,
             completed_tokens_per_s=m["tokens_per_s"] * issue / (issue + latency) if np.isfinite(latency) else 0.0)
    return m


def broken_limit(slo, ttft_p99_s: float, tpot_p99_s: float, e2e_p99_s: float | None = None) -> str:
    """The first latency limit of ``slo`` the p99s break (``SLO_TTFT``, ``SLO_TPOT``, ``SLO_E2E``), or ''."""
    if slo.ttft_ms is not None and ttft_p99_s > slo.ttft_ms * 1e-3:
        return "SLO_TTFT"
    if slo.tpot_ms is not None and tpot_p99_s > slo.tpot_ms * 1e-3:
        return "SLO_TPOT"
    if e2e_p99_s is not None and slo.e2e_ms is not None and e2e_p99_s > slo.e2e_ms * 1e-3:
        return "SLO_E2E"
    return ""
