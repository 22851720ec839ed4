"""The closed-form server queue (serving.queue_metrics) against a discrete-event simulation of the
same abstract server (infersim/des.py), plus invariants of both.

Cases: three workloads with the ISL/OSL distributions of bundled MLPerf scenarios, a fixed decode
step t_d and a mean prefill service time S ∝ ISL, each at low, medium and high load (prefill share
ρ = λ·E[S] = 0.1, 0.4, 0.7; the occupancy B is chosen to give ρ, the closed form's λ(B) drives the
DES), and one MTP case (L = 2 tokens per step):

- llama2-70b-like: ISL mean 222 (p99 791), OSL 294 fixed, t_d = 40 ms, S = 8 ms;
- deepseek-r1-like: ISL 804, OSL mean 3752 heavy-tailed (cv 1.0, 30 … 16,522), t_d = 50 ms, S = 15 ms;
- llama3.1-8b-like (prefill-heavy): ISL 871, OSL 128 fixed, t_d = 10 ms, S = 10 ms.

Tolerances on the signed error (model − DES)/DES, chosen from measurements (6 seeds × 150k and
6 seeds × 200k requests per case; one DES run of 150k requests, as here, scatters by ≲ 1 % on
means, throughput and occupancy, 1-2 % on p99 TTFT and up to ±3 % on p99 TPOT at ρ = 0.7 with a
fixed OSL, whose p99 is set by slow swings of the cycle time):

- throughput (tokens/s) and prefill share ρ: 3 %. Both follow from λ alone; measured ≤ 1 %.
- occupancy: 5 %. Time-averaged requests in the engine vs B (Little's law); measured −0.1 … −1.8 %
  (requests in their own prefill cycle and the cycles right after it see longer cycles than the
  mean, which λ(B) ignores).
- mean TTFT and mean TPOT: 5 %; measured ≤ 1.3 %.
- p99 TPOT: 10 %; measured −0 … −4 % (normal approximation of a right-skewed mean of correlated
  cycles, and the request's own admission lengthening its first decode cycles).
- p99 TTFT: 15 %, what a two-moment fit can honestly deliver. The closed form fits a two-gamma
  mixture (idle engine: t_d + S; busy: the residual of the length-biased cycle plus the next cycle,
  with their shared-cycle covariance); measured −11 … +8 % across loads, the largest misses in the
  prefill-heavy case at ρ = 0.1-0.4 whose tail shape two moments cannot capture.
- p99 end-to-end latency: 15 %; p99 TTFT plus the p99-length request's cycles with their own
  fluctuation; measured within ±4 %.

Regression (session of 2026-11-22): an earlier closed form dropped those covariance terms and read
−18 … −30 % on p99 TTFT at ρ = 0.7; these cases now pass at the stated tolerance.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from infersim import des, serving, tco
from infersim.specs import catalog

Q = 0.99
N_REQUESTS = 150_000
WORKLOADS = {  # scenario whose workload is used, t_d (s), mean prefill service time S (s)
    "llama2-70b": ("mlperf-llama2-70b-server", 0.040, 0.008),
    "deepseek-r1": ("mlperf-deepseek-r1-server", 0.050, 0.015),
    "llama3.1-8b": ("mlperf-llama3.1-8b-server", 0.010, 0.010),
}
CASES = {f"{w}-rho{r}": (w, r, 1.0) for w in WORKLOADS for r in (0.1, 0.4, 0.7)}
CASES["llama2-70b-mtp-rho0.4"] = ("llama2-70b", 0.4, 2.0)

TOLERANCE = {"tokens_per_s": 0.03, "prefill_share": 0.03, "occupancy": 0.05, "ttft_mean": 0.05, "tpot_mean": 0.05,
             "tpot_p99": 0.10, "ttft_p99": 0.15, "e2e_p99": 0.15}
# (model metric, DES metric)
PAIRS = {"tokens_per_s": ("tokens_per_s", "tokens_per_s"), "prefill_share": ("prefill_share", "prefill_share"),
         "occupancy": ("batch", "occupancy"), "ttft_mean": ("ttft_mean", "ttft_mean"),
         "tpot_mean": ("tpot_mean", "tpot_mean"), "tpot_p99": ("tpot_p99", "tpot_p"),
         "ttft_p99": ("ttft_p99", "ttft_p"), "e2e_p99": ("e2e_p99", "e2e_p")}
# (case, metric) outside the tolerance with the current serving.queue_metrics: measured error over
# 6 seeds, and whether the xfail is strict (not where the error straddles the tolerance)
KNOWN_GAPS: dict = {}  # (case, metric) -> (measured miss, strict); empty: every case meets its tolerance


@cache
def workload(name: str):
    return catalog.load("scenario", WORKLOADS[name][0]).workload


def batch_for(rho: float, osl_mean: float, t_d: float, s_mean: float, L: float) -> float:
    """B at which the closed form's prefill share λ·E[S] is ρ (λ = B/(OSL·t_d/L + B·S))."""
    return rho / (1.0 - rho) * osl_mean * t_d / (L * s_mean)


def closed_form(wl, t_d: float, s_mean: float, batch, L: float = 1.0) -> serving.ServingResult:
    stats = serving.WorkloadStats.from_workload(wl)
    s_sq = s_mean**2 * stats.isl_sq / stats.isl_mean**2  # S ∝ ISL
    batch = np.atleast_1d(np.asarray(batch, dtype=float))
    ones = np.ones_like(batch)
    return serving.queue_metrics(t_d * ones, s_mean * ones, s_sq * ones, batch, L, stats, Q, None)


@cache
def compare(case: str) -> tuple[dict, dict]:
    """(closed-form figures, DES figures) of a case, scalars."""
    name, rho, L = CASES[case]
    _, t_d, s_mean = WORKLOADS[name]
    wl = workload(name)
    batch = batch_for(rho, wl.osl.mean, t_d, s_mean, L)
    r = closed_form(wl, t_d, s_mean, batch, L)
    model = {k: float(np.ravel(getattr(r, k))[0]) for k in
             ("rate", "tokens_per_s", "prefill_share", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_p99")}
    model["batch"] = batch
    d = des.simulate_workload(wl, model["rate"], t_d, s_mean, L, n_requests=N_REQUESTS, percentile=100 * Q, seed=1)
    return model, vars(d)


def _params():
    for case in CASES:
        for metric in PAIRS:
            gap, strict = KNOWN_GAPS.get((case, metric), (None, False))
            marks = [pytest.mark.xfail(strict=strict, reason=f"serving.queue_metrics {metric} off by {gap} (module doc)")] \
                if gap else []
            yield pytest.param(case, metric, id=f"{case}-{metric}", marks=marks)


@pytest.mark.parametrize("case, metric", list(_params()))
def test_closed_form_matches_des(case, metric):
    model, sim = compare(case)
    mk, dk = PAIRS[metric]
    err = model[mk] / sim[dk] - 1.0
    assert abs(err) <= TOLERANCE[metric], (
        f"{case} {metric}: model {model[mk]:.6g} vs DES {sim[dk]:.6g} ({100 * err:+.1f} %, tolerance "
        f"{100 * TOLERANCE[metric]:.0f} %)")


# ---- invariants ---------------------------------------------------------------------------------

def test_zero_load_ttft_is_decode_step_plus_prefill():
    """λ → 0 (B → 0): TTFT = t_d + S, TPOT = t_d/L, in the closed form and, exactly, in the DES."""
    name = "llama2-70b"
    _, t_d, s_mean = WORKLOADS[name]
    wl = workload(name)
    r = closed_form(wl, t_d, s_mean, 1e-9)
    assert float(r.ttft_mean[0]) == pytest.approx(t_d + s_mean, rel=1e-6)
    assert float(r.tpot_mean[0]) == pytest.approx(t_d, rel=1e-6)
    assert float(r.prefill_share[0]) == pytest.approx(0.0, abs=1e-9)
    # the p99 is then the prefill-time p99 (from the ISL mix) on top of t_d
    s_pts, s_pr = des.service_support(*wl.isl.support, s_mean)
    s_p99 = s_pts[np.searchsorted(np.cumsum(s_pr), Q)]
    assert float(r.ttft_p99[0]) == pytest.approx(t_d + s_p99, rel=0.05)
    # DES: requests far apart find the engine idle
    rng = np.random.default_rng(0)
    s = rng.choice(s_pts, 50, p=s_pr)
    tr = des.run(np.arange(50) * 1e3, s, np.full(50, 10), t_d)
    np.testing.assert_allclose(tr.first - tr.arrival, t_d + s, rtol=0, atol=1e-9)
    np.testing.assert_allclose(tr.finish - tr.first, 10 * t_d, rtol=0, atol=1e-9)
    d = des.simulate_workload(wl, 1e-3, t_d, s_mean, n_requests=2000, seed=0)
    assert d.ttft_mean == pytest.approx(t_d + s_mean, rel=0.05)
    assert d.tpot_mean == pytest.approx(t_d, rel=1e-3)  # a rare overlap adds a prefill to a decode cycle


def test_des_gated_admission_by_hand():
    """Requests arriving during a cycle are prefilled together in the next one; an empty engine
    idles and starts a cycle at the next arrival."""
    tr = des.run([0.0, 0.5, 0.7, 5.0], [0.2, 0.1, 0.3, 0.4], [2, 1, 1, 0], t_d=1.0)
    # cycles: [0, 1.2] prefill 0; [1.2, 2.6] prefill 1 + 2; [2.6, 3.6] decode; idle; [5.0, 6.4] prefill 3
    np.testing.assert_array_equal(tr.admit, [0, 1, 1, 3])
    np.testing.assert_allclose(tr.first, [1.2, 2.6, 2.6, 6.4])
    np.testing.assert_allclose(tr.finish, [3.6, 3.6, 3.6, 6.4])
    np.testing.assert_allclose(tr.start, [0.0, 1.2, 1.2, 5.0])


def test_p99_ttft_rises_with_load():
    """Busy engine (B ≥ 10, ρ up to 0.9): p99 TTFT, p99 TPOT and ρ rise with load, in the closed
    form and in the DES."""
    for name, (_, t_d, s_mean) in WORKLOADS.items():
        wl = workload(name)
        grid = np.geomspace(10.0, batch_for(0.9, wl.osl.mean, t_d, s_mean, 1.0), 60)
        r = closed_form(wl, t_d, s_mean, grid)
        assert np.all(np.diff(r.ttft_p99) > 0), name
        assert np.all(np.diff(r.tpot_p99) > 0), name
        assert np.all(np.diff(r.prefill_share) > 0), name
        sim = [compare(f"{name}-rho{rho}")[1]["ttft_p"] for rho in (0.1, 0.4, 0.7)]
        assert sim[0] < sim[1] < sim[2], name


def test_p99_ttft_rises_with_load_near_idle():
    """Near-idle engine (B from 0.001 to 10): p99 TTFT must not fall as B grows (the DES rises:
    85, 96, 99 ms at B = 0.1, 1, 3 for llama2-70b)."""
    for name, (_, t_d, s_mean) in WORKLOADS.items():
        wl = workload(name)
        r = closed_form(wl, t_d, s_mean, np.geomspace(1e-3, 10.0, 200))
        assert np.all(np.diff(r.ttft_p99) >= 0), name


def test_cost_scales_inversely_with_throughput():
    price, accelerators = 2.5, 8
    tput_model, tput_des = [], []
    for case in CASES:
        model, sim = compare(case)
        tput_model.append(model["tokens_per_s"])
        tput_des.append(sim["tokens_per_s"])
    tput_model, tput_des = np.array(tput_model), np.array(tput_des)
    cost = tco.usd_per_million_tokens(price, accelerators, tput_model)
    np.testing.assert_allclose(cost * tput_model, price * accelerators / 3600 * 1e6, rtol=1e-12)
    cost_des = tco.usd_per_million_tokens(price, accelerators, tput_des)
    np.testing.assert_allclose(cost / cost_des, tput_des / tput_model, rtol=1e-12)
    assert np.all(np.abs(cost / cost_des - 1) < TOLERANCE["tokens_per_s"] + 1e-3)


@pytest.mark.parametrize("batch", [0.3, 1.0, 3.0])
def test_idle_share_matches_busy_factor(batch):
    """The closed form weights the residual cycle by P(busy) = 1 − e^(−B); the DES idles e^(−B)."""
    name = "llama3.1-8b"
    _, t_d, s_mean = WORKLOADS[name]
    wl = workload(name)
    r = closed_form(wl, t_d, s_mean, batch)
    d = des.simulate_workload(wl, float(r.rate[0]), t_d, s_mean, n_requests=20_000, seed=2)
    assert d.idle_share == pytest.approx(np.exp(-batch), abs=0.01)
    assert d.occupancy == pytest.approx(batch, rel=0.05)
    assert d.ttft_mean == pytest.approx(float(r.ttft_mean[0]), rel=0.03)


def test_des_rejects_overload():
    with pytest.raises(ValueError):
        des.simulate(100.0, 0.01, ([0.02], [1.0]), ([100.0], [1.0]))  # λ·E[S] = 2


def test_two_gamma_quantile_matches_fine_bisection_of_the_mixture_cdf():
    """The safeguarded Newton quantile equals 60 bisection steps of the mixture CDF (the
    definition) within 0.1 % over busy/idle weights, means and spreads of serving cycles."""
    from infersim.serving import _two_gamma_quantile, gamma_cdf

    rng = np.random.default_rng(7)
    n = 20000
    occupancy = np.exp(rng.uniform(0, 8, n))
    w2 = np.exp(-occupancy)
    w1 = 1 - w2
    m1 = np.exp(rng.uniform(-6, 2, n))
    v1 = (m1 * np.exp(rng.uniform(np.log(0.05), 1, n))) ** 2
    m2 = m1 * np.exp(rng.uniform(-4, 0, n))
    v2 = (m2 * np.exp(rng.uniform(-8, 0, n))) ** 2
    for q in (0.5, 0.9, 0.99):
        lo, hi = np.zeros(n), np.maximum(m1 + 12 * np.sqrt(v1), m2 + 12 * np.sqrt(v2))
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            below = w1 * gamma_cdf(mid, m1, v1) + w2 * gamma_cdf(mid, m2, v2) < q
            lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
        np.testing.assert_allclose(_two_gamma_quantile(w1, m1, v1, w2, m2, v2, q), 0.5 * (lo + hi), rtol=1e-3)
