"""The speed-ups of the scheduler's numerics change no number: each fast routine against the
straightforward form it replaced (kept here as the reference), bit for bit, on random inputs
that include NaN, infinities and zero weights. ``benchmarks/validate_diff.py`` does the same for
every row of ``infersim validate``; tests/test_golden.py for the goldens."""

from __future__ import annotations

import math
from statistics import NormalDist
from types import SimpleNamespace

import numpy as np
import pytest

from infersim import scheduler, serving


def ref_norm_cdf(z):
    x = np.abs(z) / np.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    half_erfc = 0.5 * poly * np.exp(-x * x)
    return np.where(z >= 0, 1.0 - half_erfc, half_erfc)


def ref_gamma_cdf(x, mean, var):
    mean = np.maximum(mean, 1e-30)
    c = np.maximum(var, 1e-30 * mean * mean) / (9.0 * mean * mean)
    return ref_norm_cdf((np.cbrt(np.maximum(x, 0.0) / mean) - (1.0 - c)) / np.sqrt(c))


def ref_two_gamma(w1, m1, v1, w2, m2, v2, q, iters=20):
    a1, b1 = serving._wilson_hilferty(m1, v1)
    a2, b2 = serving._wilson_hilferty(m2, v2)
    w1, w2, a1, b1, a2, b2 = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (w1, w2, a1, b1, a2, b2)))
    z_q = NormalDist().inv_cdf(q)
    u1, u2 = np.maximum((z_q - b1) / a1, 0.0), np.maximum((z_q - b2) / a2, 0.0)
    out = u1.copy()
    mixed = w2 > 1e-9
    if np.any(mixed):
        w1, w2, a1, b1, a2, b2, u1, u2 = (x[mixed] for x in (w1, w2, a1, b1, a2, b2, u1, u2))
        lo, hi = np.minimum(u1, u2), np.maximum(u1, u2)
        u = np.where(w1 >= w2, u1, u2)
        step_old = step = hi - lo
        done = np.zeros(u.shape, dtype=bool)  # rtsafe's stop: a point whose last step is below its tolerance
        for _ in range(iters):
            z1, z2 = a1 * u + b1, a2 * u + b2
            f = w1 * ref_norm_cdf(z1) + w2 * ref_norm_cdf(z2) - q
            below = f < 0
            lo_n, hi_n = np.where(below, u, lo), np.where(below, hi, u)
            slope = 1.0 / math.sqrt(2.0 * math.pi) * (w1 * a1 * np.exp(-0.5 * z1 * z1) + w2 * a2 * np.exp(-0.5 * z2 * z2))
            newton = u - f / slope
            at_root = np.abs(u - newton) <= serving.ROOT_RTOL * np.abs(u)
            bisect = (~((newton > lo_n) & (newton < hi_n)) | (np.abs(2.0 * f) > np.abs(step_old * slope))) & ~at_root
            step_n = np.where(bisect, 0.5 * (hi_n - lo_n), np.abs(u - newton))
            u_n = np.where(bisect, 0.5 * (lo_n + hi_n), np.where(at_root, u, newton))
            go = ~done  # a point that is done keeps its value
            lo, hi, step_old, step, u = (np.where(go, a, b) for a, b in
                                         ((lo_n, lo), (hi_n, hi), (step, step_old), (step_n, step), (u_n, u)))
            done |= (step <= serving.ROOT_RTOL * np.abs(u)) | ~np.isfinite(u)
            if done.all():
                break
        out[mixed] = u
    return out ** 3


def ref_uniform_gamma(parts, q, t0, iters=12):
    def f_g(x, k, th):
        return ref_gamma_cdf(x, k * th, k * th * th)

    def g(x, k, th):
        x = np.maximum(x, 0.0)
        return x * f_g(x, k, th) - k * th * f_g(x, k + 1.0, th)

    prep, hi = [], 0.0
    for w, a, m, v in parts:
        prep.append((w, a, m * m / v, v / m))
        hi = np.maximum(hi, a + m + 40.0 * np.sqrt(v))
    total = sum(w for w, *_ in prep)

    def cdf_pdf(t):
        c = d = 0.0
        for w, a, k, th in prep:
            uni = a > 0
            aa = np.where(uni, a, 1.0)
            ft = f_g(t, k, th)
            c = c + w * np.where(uni, (g(t, k, th) - g(t - a, k, th)) / aa, ft)
            eps = 1e-4 * np.maximum(t, 1e-12)
            pdf = np.where(uni, (ft - f_g(t - a, k, th)) / aa, (f_g(t + eps, k, th) - f_g(t - eps, k, th)) / (2 * eps))
            d = d + w * pdf
        return c / total, d / total

    lo, up = np.zeros_like(hi), hi.copy()
    t = np.clip(np.asarray(t0, dtype=float), 0.0, hi)
    for _ in range(iters):
        c, d = cdf_pdf(t)
        below = c < q
        lo, up = np.where(below, t, lo), np.where(below, up, t)
        newton = t - (c - q) / d
        at_root = np.abs(t - newton) <= serving.ROOT_RTOL * np.abs(t)
        t = np.where(at_root, t, np.where((newton > lo) & (newton < up), newton, 0.5 * (lo + up)))
        if np.all(at_root | ~np.isfinite(t)):
            break
    return t


def ref_gate_moments(e, batch, d, per_iter, offset=0.0, carried=0.0, others=None, first_offset=None):
    d = np.asarray(d, dtype=float)
    T, W = int(e.gate_timeout_iters), int(e.gate_wait_iters)
    on = (d > 1) & (T > 0)
    p_idle = 1.0 - (1.0 - np.exp(-batch / d)) ** d
    alive = np.ones(np.broadcast(per_iter, offset, d).shape)
    f_prev, m1, m2, m3 = (np.zeros_like(alive) for _ in range(4))
    for k in range(1, T + 1):
        mk = per_iter * k + (offset if k > 1 or first_offset is None else first_offset)
        none = (1.0 - carried) * np.exp(-mk)
        f = (1.0 - none) ** (d if others is None else others)
        h_all = np.clip((f - f_prev) / np.maximum(1.0 - f_prev, 1e-300), 0.0, 1.0)
        g_all = k + W * (1.0 - p_idle)
        m1 += alive * h_all * g_all
        m2 += alive * h_all * (k * k + (2 * k * W + W * W) * (1.0 - p_idle))
        m3 += alive * h_all * g_all**3
        rest = alive * (1.0 - h_all)
        h_idle = p_idle * (1.0 - none**d) if k < T else 1.0
        m1 += rest * h_idle * k
        m2 += rest * h_idle * k * k
        m3 += rest * h_idle * k**3
        alive = rest * (1.0 - h_idle)
        f_prev = f
    m1 = np.where(on, m1, 1.0)
    var = np.where(on, np.maximum(m2 - m1 * m1, 0.0), 0.0)
    return m1, var, np.where(on, m3 - 3.0 * m1 * var - m1**3, 0.0)


def same(a, b):
    return np.shape(a) == np.shape(b) and np.array_equal(a, b, equal_nan=True)


@pytest.fixture
def rng():
    return np.random.default_rng(20261125)


def test_norm_cdf(rng):
    z = np.concatenate([rng.normal(0, 4, 5000), [np.nan, np.inf, -np.inf, 0.0, -0.0]])
    assert same(serving._norm_cdf(z), ref_norm_cdf(z))
    assert same(serving._norm_cdf(z.reshape(5, -1)), ref_norm_cdf(z.reshape(5, -1)))


@pytest.mark.parametrize("shape", [(1,), (9,), (37, 11)])
def test_two_gamma_quantiles(rng, shape):
    w2 = rng.uniform(0, 1, shape) * (rng.uniform(size=shape) > 0.2)
    m1, m2 = rng.lognormal(0, 2, shape), rng.lognormal(0, 2, shape)
    v1, v2 = m1**2 * rng.lognormal(0, 2, shape), m2**2 * rng.lognormal(0, 2, shape)
    if len(shape) == 2:
        m1[0, 0], v2[1, 1], w2[2, 2] = np.nan, np.inf, 1.0
    w1 = 1.0 - w2
    qs = (0.99, 0.5, 0.9)
    with np.errstate(all="ignore"):
        got = serving._two_gamma_quantiles(w1, m1, v1, w2, m2, v2, qs)
        for g, q in zip(got, qs):
            assert same(g, ref_two_gamma(w1, m1, v1, w2, m2, v2, q))


def test_two_gamma_quantiles_are_roots(rng):
    # the solver stops once a point's Newton step is within ROOT_RTOL of it (rtsafe's stop; a fixed 20
    # iterations had bisected converged points away from the root and back, leaving 316 of these 2,000
    # medians 1e-9 or more off in probability, one 7e-4): the mixture CDF at each quantile is q to rounding
    n = 2000
    w2 = rng.uniform(0.05, 0.95, n)
    m1, m2 = rng.lognormal(0, 2, n), rng.lognormal(0, 2, n)
    v1, v2 = m1**2 * rng.lognormal(-1, 1, n), m2**2 * rng.lognormal(-1, 1, n)
    w1 = 1.0 - w2
    for q in (0.5, 0.9, 0.99):
        x = serving._two_gamma_quantile(w1, m1, v1, w2, m2, v2, q)
        cdf = w1 * ref_gamma_cdf(x, m1, v1) + w2 * ref_gamma_cdf(x, m2, v2)
        assert np.all(np.isfinite(x)) and np.max(np.abs(cdf - q)) < 1e-10


@pytest.mark.parametrize("budget", [False, True])
def test_uniform_gamma_quantiles(rng, budget):
    n = 300
    width = rng.lognormal(-3, 1, n)
    parts = []
    for i in range(2):
        u = width if i == 0 or budget else 0.0 * width
        m, v = rng.lognormal(-2, 1, n), rng.lognormal(-6, 2, n)
        parts.append((rng.uniform(0, 1, n), u, np.maximum(m - 0.5 * u, 1e-30), np.maximum(v - u * u / 12.0, 1e-6 * v)))
    starts = (rng.lognormal(-1, 1, n), rng.lognormal(-2, 1, n))
    with np.errstate(all="ignore"):
        got = scheduler._uniform_gamma_quantiles(parts, (0.99, 0.5), starts)
        for g, q, t0 in zip(got, (0.99, 0.5), starts):
            assert same(g, ref_uniform_gamma(parts, q, t0))


def test_gate_moments(rng):
    e = SimpleNamespace(gate_timeout_iters=20, gate_wait_iters=2)
    d = np.array([[1.0], [2.0], [4.0], [8.0]])
    batch = np.geomspace(1, 4096, 57)[None, :]
    per_iter = batch * 2.0 / (700.0 * d)
    carried = rng.uniform(0, 0.5, (4, 57))
    for args in ((per_iter,), (per_iter, 0.3 * per_iter, carried)):
        for g, r in zip(scheduler.gate_moments(e, batch, d, *args), ref_gate_moments(e, batch, d, *args)):
            assert same(g, r)


def test_gate_moments_long_timeout(rng):
    # the Offline recipes' 500-iteration timeout, walked a block of checks at a time and stopped once
    # every period is resolved (the mass left below 1e-15): the check-by-check walk to the end
    e = SimpleNamespace(gate_timeout_iters=500, gate_wait_iters=10)
    d = np.array([[2.0], [8.0]])
    batch = np.geomspace(64, 8192, 23)[None, :]
    per_iter = batch * 1.5 / (1500.0 * d)
    carried, off = rng.uniform(0, 0.3, (2, 23)), 0.2 * per_iter
    for kw in ({}, dict(first_offset=0.5 * off), dict(others=d - 1.0, first_offset=0.5 * off)):
        got = scheduler.gate_moments(e, batch, d, per_iter, off, carried, **kw)
        ref = ref_gate_moments(e, batch, d, per_iter, off, carried, **kw)
        for g, r in zip(got, ref):
            np.testing.assert_allclose(g, r, rtol=1e-12, atol=1e-12)
