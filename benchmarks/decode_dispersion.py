"""How the ranks' decode counts spread in the discrete-event engine, against the closed form's
assumption that they are independent Poisson counts (``scheduler.padded_rows``, random router).

The decode iteration is costed at the busiest rank's decoding sequences padded up to the next
captured graph size, so its mean depends on the whole distribution of the ranks' counts, not only
on their mean. The closed form takes the d counts as independent Poisson(B/d): the instance's count
then has variance B (a Poisson's). This script runs the test grid's engines (tests/test_scheduler.py:
synthetic costs, d = 8, graph sizes 1 … 128, random router) in ``des.simulate_engine`` with its
per-iteration ``trace`` and prints, per case:

- the DES's per-rank count (mean, variance over mean), the instance's count F = variance / mean,
  and the mean correlation between two ranks' counts;
- the mean padded rows of the DES's iterations, the closed form's at the DES's own mean decode count
  (independent Poisson), and the closed form's with the ranks' common level spread by the DES's
  own F (level ~ Normal(b, b(F − 1)/d), each rank Poisson around it: per-rank variance
  b + b(F − 1)/d, instance variance B·F; F = 1 is today's table);
- F from the decode step's elasticity alone, 1/(1 − ε) with ε = slope·B/t_d (what
  ``serving.decode_drift`` takes for the count's drift), and from the linear-noise model of the
  count (``linear_noise_f``: the arrivals feed both the count and the next iteration's stall), at the
  closed form's own decode count and at the DES's (random router only).

    python benchmarks/decode_dispersion.py [--seeds 2] [--requests 48000] [--gates off,6/2,9/3]
                                          [--budget none] [--loads 0.3,0.6,0.9] [--router random]

With ``--router balanced`` the closed form's padded rows are the balanced router's
(``scheduler._padded_balanced``: the level spread as a Poisson instance count's, F = 1, and each
rank's completions since its last refill), at the closed form's own refill of the case.

It asserts nothing; figures go to the README and the closing notes, measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the grid is defined once, in the test module

import test_scheduler as grid  # noqa: E402

from infersim import des, scheduler, serving  # noqa: E402

D = 8


def padded_spread(sizes, b: float, f: float, d: int = D, nodes: int = 24) -> float:
    """E[pad(max of d Poisson(level))], the level ~ Normal(b, b(F − 1)/d) (Gauss-Hermite, ``nodes``;
    F = 1: the closed form's independent Poisson ranks), from the Poisson CDFs at the captured sizes
    and, above the largest, at every whole count (unpadded there): smooth in b, so the linear-noise
    slope can difference it."""
    from scipy.stats import poisson

    z, w = np.polynomial.hermite.hermgauss(nodes)
    lvl = np.maximum(b + np.sqrt(2.0 * b * max(f - 1.0, 0.0) / d) * z, 1e-6)[:, None]
    s = np.asarray(sizes or (1,), dtype=float)  # no sizes: every count its own (at least one row)
    above = np.arange(s[-1] + 1.0, np.ceil(lvl.max() + 12.0 * np.sqrt(lvl.max()) + 12.0) + 1.0)
    pts = np.concatenate([s, above])
    cdf = poisson.cdf(pts[None, :], lvl) ** d  # P(max ≤ each point)
    mass = np.diff(cdf, axis=1, prepend=0.0)
    return float(np.sum(w * (mass @ pts)) / np.sqrt(np.pi))


def linear_noise_f(eng, batch: float, rate: float, gate_iters: float, d: int = D, nfft: int = 1 << 14,
                   iters: int = 40) -> float:
    """The instance's decode-count F = Var/mean at a mean decode count ``batch`` (the sequences past
    their first token), ``rate`` requests/s and a mean gate period ``gate_iters``, as a linear system in the
    iteration clock (accuracy history, thirtieth session): arrivals A_k = λ·t_k + ε_k (Poisson
    noise), the count N = H·A (H: the output-length survival two iterations on, delayed over the
    gate's period), the iteration time t = g·N + c·(A admitted) + η, with g the decode step's slope at
    the count's own spread (level ~ Normal(b, b(F − 1)/d), iterated to a fixed point), c the stall
    per admitted arrival and η the stall's residual noise over the busiest rank's tokens, spread over
    the period. S_N = [Ā|H|² + λ²|H|²σ²_η + Ā(S_shot − |H|²)|1 − λcK|²] / |1 − λgH − λcK|²."""
    st = grid.stats()
    m_pts = np.ceil(grid.OSL[0] - 1.0)
    m_p = grid.OSL[1] / np.sum(grid.OSL[1])
    top = int(m_pts.max())
    h = np.zeros(nfft)
    h[2:top + 2] = [np.sum(m_p[m_pts >= j]) for j in range(1, top + 1)]  # decoding from 2 iterations on
    acv = np.zeros(nfft)
    for tau in range(top + 1):
        acv[tau] = acv[-tau] = np.sum(m_p * np.maximum(m_pts - tau, 0.0))
    z = np.exp(-2j * np.pi * np.arange(nfft) / nfft)
    g_lo, g_hi = int(np.floor(gate_iters)), int(np.floor(gate_iters)) + 1
    frac = gate_iters - g_lo  # the period's mix of its two whole neighbours, each admitting uniformly
    kern = sum(w * sum(z ** (u + 1) for u in range(n)) / n for n, w in ((max(g_lo, 1), 1.0 - frac), (g_hi, frac)) if w > 0)
    H = np.fft.fft(h) * kern / z
    s_shot = np.fft.fft(acv).real
    a_bar = batch / np.sum(m_p * m_pts)  # arrivals per iteration (Little's law in the iteration clock)
    lump = a_bar * gate_iters  # prompts admitted per context iteration
    e0, v0 = (float(np.ravel(x)[0]) for x in scheduler.busiest_tokens(st, np.array([lump / d]), np.array([d])))
    e1 = float(np.ravel(scheduler.busiest_tokens(st, np.array([lump * 1.01 / d]), np.array([d]))[0])[0])
    c = grid.S_TOK * (e1 - e0) / (0.01 * lump)
    var_eta = max(grid.S_TOK**2 * v0 - c * c * lump, 0.0) / gate_iters
    f = 1.0
    for _ in range(iters):
        b, db = batch / d, 0.02 * batch / d
        g = grid.T1 * (padded_spread(eng.graph_sizes, b + db, f, d) - padded_spread(eng.graph_sizes, b - db, f, d)) / (2 * db * d)
        denom = np.abs(1.0 - rate * g * H - rate * c * kern) ** 2
        s_n = (a_bar * np.abs(H) ** 2 + rate**2 * np.abs(H) ** 2 * var_eta
               + a_bar * (s_shot - np.abs(H) ** 2) * np.abs(1.0 - rate * c * kern) ** 2) / denom
        f_new = float(np.mean(s_n)) / batch
        if abs(f_new - f) < 1e-3:
            return f_new
        f = 0.5 * (f + f_new)
    return f


def case(gate: str, budget: str, load: float, seeds: int, requests: int, router: str = "random") -> None:
    st = grid.stats()
    eng, batch, r = grid.placed(D, gate, budget, load, router)
    rate = float(r.rate[0])
    counts, times = [], []
    for s in range(1, seeds + 1):
        tr: list = []
        des.simulate_engine(rate, D, eng, grid.decode_time, grid.S_TOK, (st.isl_points, st.isl_probs), grid.OSL,
                            n_requests=requests, percentile=100 * grid.Q, seed=s, trace=tr)
        counts.append(np.array([c for c, _ in tr], dtype=float))
        times.append(np.array([t for _, t in tr]))
    c = np.concatenate(counts)
    total = c.sum(axis=1)
    corr = np.corrcoef(c.T)
    mean_corr = (corr.sum() - D) / (D * D - D)
    f_des = float(total.var() / total.mean())
    b = float(c.mean())
    des_rows = float(scheduler._pad(eng.graph_sizes, np.maximum(c.max(axis=1), 1.0)).mean())  # as the DES pads
    if router == "balanced":  # the balanced form at the DES's count, the case's own refill per rank
        refill = _refill(eng, batch, r)
        indep = float(np.ravel(scheduler.padded_rows(eng, total.mean(), D, refill))[0])
    else:
        indep = float(scheduler.padded_rows(eng, total.mean(), D)[()])
    mixed = padded_spread(eng.graph_sizes, b, f_des) if router == "random" else float("nan")  # a random-router model
    # the closed form's own elasticity at its occupancy (affine synthetic decode cost)
    up = batch * (1.0 + serving.DRIFT_STEP)
    ref = _refill(eng, batch, r) if router == "balanced" else None
    r0, r1 = (float(np.ravel(scheduler.padded_rows(eng, x, D, None if ref is None else ref * k))[0])
              for x, k in ((batch, 1.0), (up, 1.0 + serving.DRIFT_STEP)))
    slope = grid.T1 * (r1 - r0) / (up - batch)
    gate_iters = float(np.ravel(r.gate_iters)[0])
    own = float(np.ravel(serving.decode_batch(batch, 1.0, grid.stats()))[0])  # the closed form's decode count
    f_lin, f_lin_des = ((linear_noise_f(eng, n, rate, gate_iters) if router == "random" else float("nan"))
                        for n in (own, float(total.mean())))
    eps = min(slope * batch / (grid.T0 + grid.T1 * r0), serving.DRIFT_EPS_MAX)
    print(f"{router:>8s} {gate:>4s} {budget:>9s} {int(100 * load):3d} % | "
          f"rank mean {b:6.1f} var/mean {c.var() / b:5.2f} | "
          f"instance F {f_des:5.2f} (elasticity alone {1 / (1 - eps):4.2f}, linear noise {f_lin:4.2f} at the closed form's "
          f"count, {f_lin_des:4.2f} at the DES's) | rank corr {mean_corr:5.2f} | "
          f"padded rows DES {des_rows:6.1f}, closed form {indep:6.1f} ({100 * (indep / des_rows - 1):+5.1f} %), "
          + (f"level spread by the DES's F {mixed:6.1f} ({100 * (mixed / des_rows - 1):+5.1f} %)" if router == "random"
             else "(the level spread is a random-router model)"))


def _refill(eng, batch: float, r) -> float:
    """The closed form's completions per rank since the last refill (``engine_queue``): half a gate
    period's arrivals per rank, the budget's waiting prompts aside (no budget here)."""
    per_iter = batch * 1.0 / (grid.stats().osl_mean * D)
    return float(per_iter * (np.ravel(r.gate_iters)[0] + 1.0) / 2.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=48_000)
    ap.add_argument("--gates", default="off,6/2,9/3")
    ap.add_argument("--budget", default="none", choices=tuple(grid.BUDGETS))
    ap.add_argument("--loads", default="0.3,0.6,0.9")
    ap.add_argument("--router", default="random", choices=("random", "balanced"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    for gate in args.gates.split(","):
        for load in (float(x) for x in args.loads.split(",")):
            case(gate, args.budget, load, args.seeds, args.requests, args.router)
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
