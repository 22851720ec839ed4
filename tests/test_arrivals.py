"""Arrivals that are not Poisson: the closed forms (serving.queue_metrics, scheduler.engine_queue)
with renewal arrivals of squared coefficient of variation c_a² against the discrete-event
simulations fed gamma-distributed gaps (des.arrival_gaps), and a bursty against a smooth trace.

Cases: the three workloads of tests/test_queueing.py (same t_d and S) at prefill share ρ = 0.4
and 0.7, c_a² = 0.5 (smoother than Poisson) and 4 (bursty); c_a² = 1 is tests/test_queueing.py.
Measured (3 seeds × 60k requests, 2026-11-23), signed error (model − DES)/DES: throughput and
mean TTFT/TPOT within ±4.6 %; p99 TTFT −16 … +8 %, p99 TPOT −15 … +4 % (both worst for the
prefill-heavy llama3.1-8b-like case at c_a² = 4, where a two-moment fit of a heavy-tailed count of
clustered arrivals undershoots the tail). Tolerances: means 5 %; p99 TTFT and TPOT 15 %/10 % at
c_a² = 0.5 (as for Poisson) and 20 % at c_a² = 4.

Engine with d = 8 attention ranks (tests/test_scheduler.py costs, gate off, no budget, 60 % load):
p99 TTFT −0 … +12 % for c_a² ∈ {0.5, 1, 4}; mean TPOT and occupancy +12 % and +10 % at c_a² = 4
(the per-rank occupancy stays modelled as Poisson), so only the direction and p99 TTFT are checked.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from infersim import des, serving
from infersim.api import predict
from infersim.specs import catalog
from infersim.specs.scenario import LengthSpec, WorkloadSpec, apply_trace

from test_queueing import Q, WORKLOADS  # the same workloads and their service times (M/G/1 checks)

N_REQUESTS = 60_000
TOL = {0.5: {"tokens_per_s": 0.03, "ttft_mean": 0.05, "tpot_mean": 0.05, "ttft_p": 0.15, "tpot_p": 0.10},
       4.0: {"tokens_per_s": 0.03, "ttft_mean": 0.05, "tpot_mean": 0.05, "ttft_p": 0.20, "tpot_p": 0.20}}
MODEL_KEY = {"tokens_per_s": "tokens_per_s", "ttft_mean": "ttft_mean", "tpot_mean": "tpot_mean", "ttft_p": "ttft_p99",
             "tpot_p": "tpot_p99"}


def closed_form(stats, t_d, s_mean, batch):
    s_sq = s_mean**2 * stats.isl_sq / stats.isl_mean**2  # S ∝ ISL
    one = np.ones(1)
    return serving.queue_metrics(t_d * one, s_mean * one, s_sq * one, batch * one, 1.0, stats, Q, None)


@cache
def case(name: str, rho: float, ca2: float, seed: int = 1):
    sc, t_d, s_mean = WORKLOADS[name]
    wl = catalog.load("scenario", sc).workload
    stats = dataclasses.replace(serving.WorkloadStats.from_workload(wl), arrival_scv=ca2)
    batch = rho / (1.0 - rho) * stats.osl_mean * t_d / s_mean
    r = closed_form(stats, t_d, s_mean, batch)
    sim = des.simulate_workload(wl, float(r.rate[0]), t_d, s_mean, 1.0, n_requests=N_REQUESTS, seed=seed,
                                arrival_scv=ca2)
    return {k: float(np.ravel(getattr(r, v))[0]) for k, v in MODEL_KEY.items()}, sim


@pytest.mark.parametrize("ca2", [0.5, 4.0])
@pytest.mark.parametrize("rho", [0.4, 0.7])
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_closed_form_tracks_des_with_renewal_arrivals(name, rho, ca2):
    model, sim = case(name, rho, ca2)
    bad = {}
    for k, tol in TOL[ca2].items():
        err = model[k] / getattr(sim, k) - 1.0
        if abs(err) > tol:
            bad[k] = f"{100 * err:+.1f} % (tolerance {100 * tol:.0f} %)"
    assert not bad, f"{name} ρ={rho} c_a²={ca2}: {bad}"


def test_burstiness_raises_p99_ttft_in_both():
    name, rho = "llama2-70b", 0.4
    sc, t_d, s_mean = WORKLOADS[name]
    stats = serving.WorkloadStats.from_workload(catalog.load("scenario", sc).workload)
    batch = rho / (1.0 - rho) * stats.osl_mean * t_d / s_mean
    cf = [float(closed_form(dataclasses.replace(stats, arrival_scv=c), t_d, s_mean, batch).ttft_p99[0])
          for c in (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)]
    assert np.all(np.diff(cf) > 0), cf
    sim = [case(name, rho, c)[1].ttft_p for c in (0.5, 4.0)]
    poisson = des.simulate_workload(catalog.load("scenario", sc).workload, case(name, rho, 0.5)[1].rate, t_d, s_mean,
                                    n_requests=N_REQUESTS, seed=1).ttft_p
    assert sim[0] < poisson < sim[1]


def test_poisson_limit_is_continuous():
    """The renewal corrections vanish smoothly at c_a² = 1 (where the code skips them)."""
    sc, t_d, s_mean = WORKLOADS["deepseek-r1"]
    stats = serving.WorkloadStats.from_workload(catalog.load("scenario", sc).workload)
    base = closed_form(stats, t_d, s_mean, 500.0)
    for c in (0.999, 1.001):
        near = closed_form(dataclasses.replace(stats, arrival_scv=c), t_d, s_mean, 500.0)
        for k in ("ttft_mean", "ttft_p99", "tpot_p99"):
            assert float(getattr(near, k)[0]) == pytest.approx(float(getattr(base, k)[0]), rel=2e-3), (c, k)


def engine_against_des(d: int, budget: str, load: float, ca2s, seeds=(3,)):
    """tests/test_scheduler.py's engine (gate off) with d ranks and ``budget`` at ``load`` of its
    capacity: (closed form, DES) per arrival dispersion in ``ca2s`` (20,000 requests per seed in
    ``seeds``; with several, the DES's figures are their means, ``_SeedMean``)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import test_scheduler as ts
    from infersim import scheduler

    eng = ts.engine_for(d, "off", budget)
    b, rate = ts.capacity(d, "off", budget)
    i = int(np.argmax(rate))
    batch = float(np.interp(load * rate[i], rate[: i + 1], b[: i + 1]))
    out = []
    for ca2 in ca2s:
        st = dataclasses.replace(ts.stats(), arrival_scv=ca2)
        pre = lambda n, imb: ts.S_TOK * st.isl_mean * imb / d  # noqa: E731
        r = scheduler.engine_queue(eng, d, np.atleast_1d(batch), st, 1.0, Q, ts.decode_time, pre)
        sims = [des.simulate_engine(float(r.rate[0]), d, eng, ts.decode_time, ts.S_TOK, (st.isl_points, st.isl_probs),
                                    ts.OSL, n_requests=20_000, seed=s, arrival_scv=ca2) for s in seeds]
        out.append((r, sims[0] if len(sims) == 1 else _SeedMean(sims)))
    return out


class _SeedMean:
    """The mean of several DES runs' figures (attribute access as on one run)."""

    def __init__(self, runs):
        self.runs = runs

    def __getattr__(self, name):
        return float(np.mean([getattr(r, name) for r in self.runs]))


def test_engine_with_attention_ranks_orders_burstiness_as_its_des():
    model, sim = [], []
    for ca2, (r, s) in zip((0.5, 1.0, 4.0), engine_against_des(8, "none", 0.6, (0.5, 1.0, 4.0))):
        model.append(float(r.ttft_p99[0]))
        sim.append(s.ttft_p)
        assert model[-1] == pytest.approx(sim[-1], rel=0.15), (ca2, model[-1], sim[-1])
    assert model[0] < model[1] < model[2] and sim[0] < sim[1] < sim[2]


# ---- a bursty and a smooth trace with the same lengths ----------------------------------------------

def _traces(tmp_path, n: int = 20_000):
    """Two traces with identical (isl, osl) rows; arrivals gamma gaps of c_a² 0.25 and 4."""
    rng = np.random.default_rng(11)
    isl = np.maximum(np.round(rng.lognormal(np.log(700), 0.6, n)), 1).astype(int)
    osl = np.maximum(np.round(rng.lognormal(np.log(250), 0.5, n)), 2).astype(int)
    out = {}
    for label, scv in (("smooth", 0.25), ("bursty", 4.0)):
        t = np.cumsum(des.arrival_gaps(rng, 1.0, n, scv))
        f = tmp_path / f"{label}.csv"
        f.write_text("isl,osl,arrival_s\n" + "".join(f"{a},{b},{x:.6f}\n" for a, b, x in zip(isl, osl, t)))
        out[label] = f
    return out


def test_bursty_trace_has_worse_p99_ttft_than_smooth_as_the_des_says(tmp_path):
    files = _traces(tmp_path)
    base = WorkloadSpec(isl=LengthSpec(mean=1), osl=LengthSpec(mean=1))
    wls = {k: apply_trace(base, f) for k, f in files.items()}
    assert wls["smooth"].isl == wls["bursty"].isl and wls["smooth"].osl == wls["bursty"].osl
    assert wls["smooth"].arrival_dispersion < 0.5 < 2.0 < wls["bursty"].arrival_dispersion
    # the closed form at the same engine and load
    t_d, s_mean, rho = 0.030, 0.012, 0.5
    model, sim = {}, {}
    for k, wl in wls.items():
        stats = serving.WorkloadStats.from_workload(wl)
        batch = rho / (1.0 - rho) * stats.osl_mean * t_d / s_mean
        r = closed_form(stats, t_d, s_mean, batch)
        model[k] = float(r.ttft_p99[0])
        # the DES replays the trace itself: its own gaps (rescaled to the closed form's rate), its
        # paired lengths (prefill ∝ ISL, decode cycles from OSL)
        rows = np.loadtxt(files[k], delimiter=",", skiprows=1)
        mean_gap = (rows[-1, 2] - rows[0, 2]) / (len(rows) - 1)
        arr = (rows[:, 2] - rows[0, 2]) / mean_gap / float(r.rate[0])  # mean gap 1/λ
        tr = des.run(arr, s_mean * rows[:, 0] / rows[:, 0].mean(), des.decode_cycles(rows[:, 1]), t_d)
        ttft = (tr.first - tr.arrival)[len(rows) // 10:]
        sim[k] = float(np.percentile(ttft, 100 * Q))
    assert np.sign(model["bursty"] - model["smooth"]) == np.sign(sim["bursty"] - sim["smooth"]) == 1.0
    assert model["bursty"] > 1.2 * model["smooth"] and sim["bursty"] > 1.2 * sim["smooth"]
    # and end to end through the API: same system and batch, only the arrival process differs
    got = {k: predict("h200-sxm", "llama3.1-8b", "chat-1k-1k", 8, trace=f, round="v5.1", batch=64, tp=1)
           for k, f in files.items()}
    assert got["bursty"].metrics["tokens_per_s"] == pytest.approx(got["smooth"].metrics["tokens_per_s"], rel=1e-9)
    assert got["bursty"].metrics["ttft_s"] > got["smooth"].metrics["ttft_s"]


@pytest.mark.parametrize("mode", ["aggregated", "disagg"])
def test_burstier_traffic_never_raises_capacity_under_the_limits(mode):
    """The best point meeting p99 TTFT/TPOT: smooth ≥ Poisson ≥ bursty output tokens/s (the
    disaggregated prefill pool's queue uses the Allen-Cunneen G/G/1 wait). The p99 TTFT limit is
    tightened to 250 ms so that the queue, which the arrival process shapes, is what binds (at the
    scenario's 1 s the best point can sit on the batch cap, where every process gives the same; at
    200 ms the bursty disaggregated case has no feasible point with the 2026-11-26 fit)."""
    from infersim.api import load_inputs

    base = load_inputs("h200-sxm", "llama3.1-70b", "chat-1k-1k")
    slo = base.scenario.slo.model_copy(update={"ttft_ms": 250.0})
    flags = {"enable": ["disagg"]} if mode == "disagg" else {"disable": ["disagg"]}
    got = []
    for ca2 in (0.25, 1.0, 4.0):
        wl = base.scenario.workload.model_copy(update={"arrival_dispersion": ca2})
        inputs = dataclasses.replace(base, scenario=base.scenario.model_copy(update={"workload": wl, "slo": slo}))
        p = predict("h200-sxm", "llama3.1-70b", "chat-1k-1k", 16, inputs=inputs, round="v6.0", **flags)
        assert p.feasible, (mode, ca2, p.reason)
        got.append(p.metrics["tokens_per_s"])
    assert got[0] >= got[1] >= got[2] and got[0] > got[2], got


# ---- arrivals switching between a quiet and a busy rate (Markov-modulated Poisson) ------------------

def test_switching_rates_are_fitted_and_renewal_traffic_is_not():
    import sys
    from pathlib import Path

    from infersim.specs.traffic import Trace

    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    import synthetic_traces

    rng = np.random.default_rng(5)
    t = synthetic_traces.arrivals(rng, 100_000)  # quiet 1/s for 40 s, busy 8/s for 5 s (mean 1.78/s)
    states = Trace(isl=np.ones(len(t)), osl=np.ones(len(t)), arrival_s=t).rate_states()
    (f_quiet, w_quiet), (f_busy, w_busy) = states
    assert f_quiet == pytest.approx(1 / 1.78, rel=0.15) and f_busy == pytest.approx(8 / 1.78, rel=0.15)
    assert w_busy == pytest.approx(5 / 45, rel=0.15)
    for scv in (1.0, 4.0, 16.0):  # renewal arrivals have no lasting states, however bursty
        g = np.cumsum(des.arrival_gaps(rng, 1.0, 50_000, scv))
        assert Trace(isl=np.ones(len(g)), osl=np.ones(len(g)), arrival_s=g).rate_states() is None


def test_switching_rates_closed_form_is_nearer_the_des_than_one_renewal_dispersion():
    """A replayed MMPP stream (DES, 60k requests, the generator of the bundled trace: busy state at
    4.5× the mean rate 11 % of the time) against the quasi-static two-state mixture and against the
    renewal model with the stream's gap c_a² (2.2), same engine and mean rate. Measured p99 TTFT
    error at prefill share 0.03/0.05/0.1/0.15/0.2: mixture −15/−18/−23/−27/−30 %, renewal
    −11/−20/−43/−63/−77 %. Both miss low: the backlog a burst's onset builds before the busy state's
    steady state is not modelled. Checked: the mixture within 35 %, and nearer than the renewal
    model from 0.1 on."""
    import sys
    from pathlib import Path

    from infersim import scheduler
    from infersim.plan import Engine
    from infersim.specs.traffic import Trace

    sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
    import synthetic_traces

    rng = np.random.default_rng(5)
    n = 60_000
    t = synthetic_traces.arrivals(rng, n)
    rows = list(synthetic_traces.rows(rng, n))
    isl = np.array([r[0] for r in rows], float)
    osl = np.array([r[1] for r in rows], float)
    tr = Trace(isl=isl, osl=osl, arrival_s=t)
    states = tr.rate_states()
    base = dataclasses.replace(serving.WorkloadStats.from_workload(
        WorkloadSpec(isl=LengthSpec(mean=float(isl.mean()), p50=float(np.median(isl)), p99=float(np.percentile(isl, 99))),
                     osl=LengthSpec(mean=float(osl.mean()), p50=float(np.median(osl)), p99=float(np.percentile(osl, 99))))))
    t_d, s_mean, eng = 0.03, 0.02, Engine()

    def closed(stats, batch):
        pre = lambda n_, imb: s_mean  # noqa: E731
        dec = lambda rows_: t_d + 0.0 * rows_  # noqa: E731
        if stats.rate_states is None:
            return scheduler.engine_queue(eng, 1, np.atleast_1d(batch), stats, 1.0, Q, dec, pre)
        one = dataclasses.replace(stats, rate_states=None)
        return scheduler.rate_states_mix(lambda b: scheduler.engine_queue(eng, 1, b, one, 1.0, Q, dec, pre),
                                         np.atleast_1d(batch), states, Q)

    for rho in (0.05, 0.1, 0.2):
        batch = rho / (1 - rho) * base.osl_mean * t_d / s_mean
        mixed = closed(dataclasses.replace(base, rate_states=tuple(states)), batch)
        lam = float(mixed.rate[0])
        renewal_b = batch * lam / float(closed(base, batch).rate[0])  # same mean rate for the renewal model
        renewal = closed(dataclasses.replace(base, arrival_scv=tr.arrival_dispersion), renewal_b)
        arr = (t - t[0]) * ((n - 1) / (t[-1] - t[0])) / lam
        run = des.run(arr, s_mean * isl / isl.mean(), des.decode_cycles(osl), t_d)
        sim = float(np.percentile((run.first - run.arrival)[n // 10:], 100 * Q))
        err_mixed = float(mixed.ttft_p99[0]) / sim - 1
        err_renewal = float(renewal.ttft_p99[0]) / sim - 1
        assert abs(err_mixed) < 0.35, (rho, err_mixed)
        if rho >= 0.1:
            assert abs(err_mixed) < abs(err_renewal), (rho, err_mixed, err_renewal)
        assert abs(err_mixed) < 0.35, (rho, err_mixed)


# ---- renewal arrivals into a chunked token budget ---------------------------------------------------

@pytest.mark.parametrize("load", [0.6, 0.9])
def test_chunked_budget_backlog_follows_the_arrivals_dispersion(load):
    # One rank, 512-token chunked budget (tests/test_scheduler.py's costs): the prompts waiting for
    # the budget form a token queue whose backlog scales with the arrival count's dispersion
    # (Kingman, ``scheduler.rank_backlog``), and so does the diffusion length of its tail
    # (``scheduler.backlog_decay`` × the same factor). Measured against the DES (20,000 requests, seed
    # 3; 2026-11-27): c_a² = 0.25 mean / p99 TTFT +11 / +11 % at 60 % load, +15 / +8 % at 90 %
    # (Poisson's backlog: +12 / +24 %, +39 / +62 %); c_a² = 4 −22 / −26 % and −31 / −34 % (−23 / −51 %,
    # −56 / −72 %). Against seeds 1-4 (2026-11-29, thirty-seventh session), before / since the prompts
    # behind a carried backlog keep its exponential tail and the backlog the decoders it feeds:
    # c_a² = 0.25 +10.9 / +9.4 → +10.9 / +10.6 % at 60 %, +12.0 / −5.4 → +15.1 / +7.1 % at 90 %;
    # Poisson −0.4 / −10.7 → −0.2 / −8.1 %, −7.1 / −24.5 → −0.3 / −8.9 %; c_a² = 4 −21.4 / −21.9 →
    # −20.8 / −15.6 %, −28.7 / −36.7 → −13.8 / −16.6 % (seed 3 alone put c_a² = 0.25 at 90 % at
    # +18.6 / +21.8 %: the oracle is the seeds' mean).
    got = {ca2: (float(r.ttft_mean[0]), float(r.ttft_p99[0]), s.ttft_mean, s.ttft_p)
           for ca2, (r, s) in zip((0.25, 1.0, 4.0),
                                  engine_against_des(1, "chunk512", load, (0.25, 1.0, 4.0), seeds=(1, 2, 3, 4)))}
    m, p, sm, sp = got[0.25]
    assert m == pytest.approx(sm, rel=0.20) and p == pytest.approx(sp, rel=0.20)
    m, p, sm, sp = got[4.0]
    assert m == pytest.approx(sm, rel=0.25) and p == pytest.approx(sp, rel=0.25)
    for k in (0, 1, 2, 3):  # smoother arrivals wait less, in the model as in the DES
        assert 0.0 < got[0.25][k] < got[1.0][k] < got[4.0][k]


def test_smooth_arrivals_into_a_chunked_budget_keep_ttft_positive(tmp_path):
    # Found 2026-11-27: Llama 3.1 405B on 4 × TP2 B300 (chunked, 1,024-token budget) with
    # arrival_dispersion 0.25 printed a mean TTFT of −3.6 s and p99 0: the renewal correction to the
    # busiest rank's tokens per period was the uncapped count's, subtracted from a capped variance.
    import yaml

    data = yaml.safe_load((Path(__file__).resolve().parent.parent / "scenarios" / "mlperf-llama3.1-405b-server.yaml")
                          .read_text())
    out = []
    for ca2 in (0.25, 1.0):
        data["workload"]["arrival_dispersion"] = ca2
        path = tmp_path / f"s{ca2}.yaml"
        path.write_text(yaml.safe_dump(data))
        p = predict("b300", "llama3.1-405b", str(path), 8, round="v6.0", tp=2, batch=10.0)
        assert p.feasible, p.reason
        out.append((p.metrics["ttft_mean_s"], p.metrics["ttft_s"]))
    (m_s, p99_s), (m_p, p99_p) = out
    assert 0.0 < m_s < m_p and 0.0 < p99_s < p99_p
