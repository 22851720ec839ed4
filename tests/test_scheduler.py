"""The iteration-level scheduler (infersim.scheduler) against its discrete-event oracle
(des.simulate_engine), and its exact reduction to today's queue (serving.server).

Costs are synthetic and shared by both sides so that the test isolates the scheduling model:
decode iteration t_d(rows) = 10 ms + 50 us × rows (rows: the busiest rank's decoding sequences,
padded to the captured graph size), prefill stall = 20 us × the busiest rank's prompt tokens.
Workload: llama2-70b Server prompt lengths (mean 222, p99 791), output lengths 32/64/128
(30/40/30 %) so each run is short. Grid: d ∈ {1, 8}; gate off, 6/2 and 9/3 iterations
(timeout/wait, the v5.1/v6.0 DeepSeek-R1 settings); no budget, a non-chunked and a chunked
budget; loads at 30/60/90 % of capacity (the highest arrival rate the closed form sustains with
the batch cap); 12,000 requests per run, seeded.

Tolerances (module docstring of tests/test_queueing.py): means 5 % (throughput, decode batch, mean
TTFT, mean TPOT), p99 TPOT 10 %, p99 TTFT 15 %; feasibility flags must agree (closed form
BATCH_LIMIT / TOKEN_BUDGET against the DES's share of requests waiting for a slot above 1 − q or
a prompt blocked by the budget left beside its rank's decode tokens). The decode batch is the
sequences past their first token on both sides (EngineDes.decode_batch; serving.decode_batch of
the closed form's occupancy B): B counts each request for OSL/L mean iterations while the DES's
occupancy counts it from the start of its admitting iteration, a longer one (the context
iteration, with the prompt's own prefill; chunked, the iterations of its rest), so occupancies
differ by λ × that excess, not by the scheduling model (seed 3, apart from the 6/2 gap: occupancy
−4.5 … +1.2 %, decode batch −1.4 … +1.9 %; multi-step 9 at 90 %: −4.5 against −0.6 %).

Two routers (plan.Engine.rank_router): the grid runs with the random router (each request to a
uniformly random rank, per-rank counts independent Poisson: the model every earlier figure below
refers to), and its 8-rank cases again with the balanced router, TensorRT-LLM's ADP routing and
the engines' own (test_balanced_router_matches_engine_des: 23 of 27 meet every tolerance, the
misses in KNOWN_GAPS_BALANCED, two of them smaller since the thirty-first session's pull of the
router on a backlogged rank near saturation; 20 of 27 before the gated chunked admitting iteration stalled for
its own share of the period's prompt tokens, thirtieth session; 16 of 27 before a balanced rank's prompt tokens were its count's
share plus one prompt's deviation, twenty-eighth session, ``scheduler.busiest_tokens``; 11 of 27
before the admitting iteration's stall was the busiest rank's tokens of its prompt count, sixth
session; the random closed form against the balanced DES met 1 of the 27, 2026-11-26, fifth session).

Measured (seed 3, this module's grid, 2026-11-29): 34 of 36 cases meet every tolerance (33 before the
prompts behind a carried backlog kept its exponential tail and the backlog the decoders it feeds,
thirty-seventh session: d = 1 chunked at 90 % passes, mean TTFT −8.2 → −1.5 %, p99 TTFT −21 → −5 %
against 8 seeds × 48,000 requests, test_carried_backlog_keeps_its_exponential_tail; 34 before
a chunked prompt's first context iteration took at most one budget, ninth session: d = 1 chunked at
90 % went from −4.5 to −8.8 % mean TTFT at seed 3, −2.8 ± 4.0 % over 4 seeds × 48,000 requests, while
30 / 60 % went from +2.7 / +4.0 to +0.4 / +0.6 % and prompts longer than the budget from +49 / +38 % to
+3.6 / +2.2 %, test_long_prompts_over_a_chunked_budget; 33 before
the gated chunked stall counted a rest beyond one budget, the first gate check saw only the
admitting iteration's stall and a backlogged rank's shorter period kept its stall, 32 before
a chunked prompt's last extra iteration was priced at what is left of it, 31 before whole prompts
left their budget's last gap unused, 30 before the backlog of an ungated rank's
budget queue took the arrivals of a full-budget iteration, 19 before the token-budget model of
scheduler.capped_tokens / budget_wait and the gated TTFT quantile, 29 before the gated chunked
model of scheduler.rest_max). The misses are listed in KNOWN_GAPS (strict xfail: a case that starts
to pass fails until it is removed from the list) and are the model's open problems:
- chunked prefill with the attention-DP gate: throughput and mean TPOT within 1 % and mean TTFT within
  4 % at 30-60 % (the p99 at 6/2 60 % was −23 %, now −9 %: the stall of a rest longer than one
  budget, 27 % of the periods, the gate's first check and a backlogged rank's arrivals, see
  scheduler.engine_queue); left, near the gated budget limit (90 %), where each rank's queue runs
  at 95 % load and 1 % more arrivals per period is 20 % more backlog:
  9/3 −13 % mean / +18 % p99 (−11 % before the admitting iteration's own stall share, thirtieth
  session; was −20 % / −4 %; against 6 seeds × 48,000 requests −5 % / −13 %,
  was −22 % / −27 %: seed 3's p99 is 1.7 s where the seeds' mean is 2.2 s ± 0.35 s); 6/2 +35 %
  mean (+38 % before the stall share; was −7 %), decode batch +12 %, TPOT +10 %: the 90 % rate sits on the plateau of λ(B)
  where the busiest rank's padded decode rows jump from 64 to 128 (λ within 1.3 % over B = 420 …
  480), so 1 % in rate is about 10 % in occupancy. At the DES's occupancy (428) the model's rows
  would be 96.5 against the DES's 81.9: 10.8 because the closed form prices its decode at the
  whole occupancy B where the DES decodes only the sequences past their first token (419; D =
  B·(1 − L/OSL) by the closed form's own Little's law, serving.decode_batch; pricing at D, branch
  occ-decode-batch, takes 4 seeds × 48,000 from +45 to +31 % mean TTFT and +10 to +8 %
  occupancy, but moves the 90 % points of d = 1 chunked, 6/2 non-chunked and multi-step 4 with a
  budget out of tolerance at seed 3) and 3.8 because the model takes the ranks' decode counts as
  independent Poisson(D/d) where in the DES they move together (the instance's count varies
  3.2 × a Poisson's: on the flat λ(B) the occupancy has little restoring force; the busiest rank
  is at most 64 in 72 % of the iterations against 68 %); the missing rest stall used to offset
  this (6 seeds × 48,000: +2 % mean, +4.5 % occupancy before, +37 % / +11 % now). The rank backlog
  at 90 % was +62 … +111 % while its Lindley mean came from a closure that overstated it
  1.3-2.7 × at loads 0.9-0.95 and was interpolated across the pole at saturation
  (scheduler._lindley_backlog now);
- (closed) d = 1 chunked at 90 % load: the prompt-token backlog's wait was 20 % (mean) / 27 % (p99)
  short while the backlog's queue took the arrivals of the mean iteration; now −4.5 % / −6.3 %;
- (closed) 6/2 non-chunked at 90 %: mean TTFT +5.3 % while whole prompts were packed like chunks
  (now +2.7 %: a rank's take leaves the gap before the next prompt unused);
- (closed) d = 8 chunked gate off at 30 % load: mean TTFT +6.2 % while every extra iteration of a
  chunked prompt was priced at a full budget on the busiest rank (now +4.2 %: the last one takes
  only the prompt's rest unless a backlog queues behind it).
Against a longer DES (4 seeds × 48,000 requests; 39 of 48 with the multi-step cases) some passing
cases miss: d = 8 at 90 % without a budget or non-chunked (gate off, 6/2, 9/3) at +5-6 % mean TTFT
(and +5 % mean TPOT gated), d = 1 chunked at 90 % at −18 % p99 TTFT; seed 3 is the yardstick.
"""

from __future__ import annotations

import dataclasses
import math
from functools import cache

import numpy as np
import pytest

from infersim import des, scheduler, serving
from infersim.errors import Reason
from infersim.plan import Engine
from infersim.specs import catalog

Q = 0.99
N_REQUESTS = 12_000
T0, T1, S_TOK = 0.010, 50e-6, 20e-6
OSL = (np.array([32.0, 64.0, 128.0]), np.array([0.3, 0.4, 0.3]))
GATES = {"off": (0, 0), "6/2": (6, 2), "9/3": (9, 3)}
BUDGETS = {"none": (None, True), "flat2048": (2048, False), "chunk512": (512, True)}
LOADS = (0.3, 0.6, 0.9)
CAP = {1: 256, 8: 96}
TOL = {"tokens_per_s": 0.05, "decode_batch": 0.05, "ttft_mean": 0.05, "tpot_mean": 0.05, "tpot_p99": 0.10, "ttft_p99": 0.15}
PAIRS = {"tokens_per_s": "tokens_per_s", "decode_batch": "decode_batch", "ttft_mean": "ttft_mean", "tpot_mean": "tpot_mean",
         "tpot_p99": "tpot_p", "ttft_p99": "ttft_p"}


def with_outputs(s: serving.WorkloadStats, osl) -> serving.WorkloadStats:
    """``s`` with the output lengths ``osl`` (points, probabilities; three classes, 16 equal-mass
    points 5/6/5, the p99 the longest)."""
    return dataclasses.replace(s, osl_mean=float(np.sum(osl[0] * osl[1])), osl_sq=float(np.sum(osl[0] ** 2 * osl[1])),
                               osl_points=np.repeat(osl[0], [5, 6, 5]), osl_probs=np.full(16, 1 / 16),
                               osl_p99=float(np.max(osl[0])))


@cache
def stats() -> serving.WorkloadStats:
    s = serving.WorkloadStats.from_workload(catalog.load("scenario", "mlperf-llama2-70b-server").workload)
    return dataclasses.replace(with_outputs(s, OSL), isl_max=float(np.max(s.isl_points)))


def decode_time(rows):
    return T0 + T1 * np.asarray(rows, dtype=float)


def closed(engine: Engine, d: int, batch):
    st = stats()
    pre = lambda n, imb: S_TOK * st.isl_mean * imb / d  # noqa: E731  (X = s_tok × busiest rank's tokens)
    return scheduler.engine_queue(engine, d, np.atleast_1d(np.asarray(batch, dtype=float)), st, 1.0, Q, decode_time, pre)


def engine_for(d: int, gate: str, budget: str, router: str = "random") -> Engine:
    T, W = GATES[gate]
    mnt, chunked = BUDGETS[budget]
    sizes = (1, 2, 4, 8, 16, 32, 64, 128) if d > 1 else None
    return Engine(max_batch_size=CAP[d], max_num_tokens=mnt, chunked_prefill=chunked, gate_timeout_iters=T,
                  gate_wait_iters=W, graph_sizes=sizes, rank_router=router)


@cache
def capacity(d: int, gate: str, budget: str, router: str = "random") -> tuple[np.ndarray, np.ndarray]:
    """Occupancy axis and rates; capacity is the largest rate where the closed form is feasible."""
    b = np.geomspace(1.0, CAP[d] * d, 160)
    r = closed(engine_for(d, gate, budget, router), d, b)
    return b, np.where(r.ok, r.rate, 0.0)


def case_ids():
    for d in (1, 8):
        for gate in (GATES if d > 1 else ["off"]):
            for budget in BUDGETS:
                for load in LOADS:
                    yield d, gate, budget, load


def at_load(eng: Engine, d: int, b: np.ndarray, rate: np.ndarray, load: float):
    """(occupancy, closed form) at ``load`` of the largest feasible ``rate`` on the occupancy axis ``b``."""
    i = int(np.argmax(rate))
    batch = float(np.interp(load * rate[i], rate[: i + 1], b[: i + 1]))
    return batch, closed(eng, d, batch)


def placed(d: int, gate: str, budget: str, load: float, router: str = "random"):
    """(engine, occupancy, closed form) of an ADP grid case at ``load`` of its capacity."""
    eng = engine_for(d, gate, budget, router)
    return (eng, *at_load(eng, d, *capacity(d, gate, budget, router), load))


def figures(r, batch: float) -> dict:
    """The closed form's figures the tolerances compare (``PAIRS``' keys), its feasibility and reason."""
    model = {k: float(np.ravel(getattr(r, k))[0]) for k in ("tokens_per_s", "ttft_mean", "tpot_mean", "tpot_p99", "ttft_p99")}
    # the sequences past their first token on both sides (serving.decode_batch, EngineDes.decode_batch):
    # B itself counts each request for OSL/L mean iterations, the DES's occupancy from the start of
    # its admitting iteration, a longer one (a context iteration, with the prompt's own prefill, and
    # chunked the iterations of its rest): unlike by λ × that excess, −0.5 to −4 % (multi-step 9)
    model["decode_batch"] = float(serving.decode_batch(batch, 1.0, stats()))
    model["ok"] = bool(r.ok[0])
    model["reason"] = int(r.reason[0])
    return model


@cache
def compare(d: int, gate: str, budget: str, load: float, n_requests: int = N_REQUESTS, seed: int = 3,
            router: str = "random"):
    """The closed form at ``load`` of its capacity and the DES at the same arrival rate (the test's
    oracle: ``n_requests`` requests, ``seed``; benchmarks/operating_points.py --des-requests runs a
    longer one, benchmarks/scheduler_grid.py several seeds)."""
    eng, batch, r = placed(d, gate, budget, load, router)
    st = stats()
    sim = des.simulate_engine(float(r.rate[0]), d, eng, decode_time, S_TOK, (st.isl_points, st.isl_probs), OSL,
                              n_requests=n_requests, percentile=100 * Q, seed=seed)
    return figures(r, batch), sim


KNOWN_GAPS = {  # (d, gate, budget, load) -> measured miss (model − DES)/DES
    (8, "6/2", "chunk512", 0.9): "decode_batch +12 %; ttft_mean +35 %; tpot_mean +10 %; ttft_p99 +67 %",
    (8, "9/3", "chunk512", 0.9): "ttft_mean -13 %; ttft_p99 +18 %",
    # (1, "off", "chunk512", 0.9) passes since the thirty-seventh session: the prompts behind a
    # carried backlog keep its exponential tail and the backlog the decoders it feeds
    # (scheduler._carried_quantile, scheduler.backlog_feedback): mean TTFT −8.2 → −1.5 %, p99 −7.1 →
    # +12.1 % at seed 3; against 8 seeds × 48,000 requests p99 −21 → −5 %, mean −2.8 → +4 %
}


def _gapped(cases, gaps: dict, ident):
    """``pytest.param`` per case, a strict xfail where ``gaps`` lists it (a case that starts to pass
    fails until it is removed from the list)."""
    for c in cases:
        gap = gaps.get(c)
        marks = [pytest.mark.xfail(strict=True, reason=f"known gap: {gap}")] if gap else []
        yield pytest.param(*c, marks=marks, id=ident(*c))


def _params():
    return _gapped(case_ids(), KNOWN_GAPS, lambda d, g, b, load: f"d{d}-gate{g}-{b}-load{int(100 * load)}")


def des_ok(sim) -> bool:
    """Feasible in the DES: at most 1 − q of requests wait for a slot and no prompt is blocked."""
    return sim.slot_wait_share <= 1 - Q and not sim.blocked


def _check(model, sim):
    assert model["ok"] == des_ok(sim), (model["reason"], sim.slot_wait_share, sim.budget_spill_share, sim.blocked)
    errs = {k: model[k] / getattr(sim, v) - 1.0 for k, v in PAIRS.items()}
    bad = {k: f"{100 * e:+.1f} %" for k, e in errs.items() if abs(e) > TOL[k]}
    assert not bad, f"outside tolerance: {bad}"


@pytest.mark.parametrize("d, gate, budget, load", list(_params()))
def test_closed_form_matches_engine_des(d, gate, budget, load):
    """The random router (``Engine.rank_router``: per-rank counts independent Poisson)."""
    _check(*compare(d, gate, budget, load))


KNOWN_GAPS_BALANCED = {  # (gate, budget, load) -> measured miss (model − DES)/DES, d = 8, seed 3
    # The busiest rank's new prompt tokens (twenty-eighth session): the router hands the longest
    # prompts to the ranks holding the fewest active prompt tokens, so what a rank holds in a period
    # is its count's share plus one prompt's deviation, (N − 1)·E[ISL] + ISL (``busiest_tokens``);
    # at the DES's rate it gives 1,262 / 1,519 / 1,712 tokens (6/2 60 %, 9/3 60 %, 6/2 90 %) against
    # the DES's 1,257 / 1,500 / 1,701, where the compound Poisson sum of the random router gave
    # 1,416 / 1,706 / 1,921 (the DES's random router there: 1,406 / 1,697 / 1,916) and the five
    # non-chunked gated cases missed by +6-9 % in TTFT (seventh and fifteenth sessions: the lengths'
    # steering, −8 % given the counts, was the gap; the gate's own period is within 2 %). They pass
    # now; against 4 seeds × 48,000 requests (benchmarks/scheduler_grid.py --router balanced) 22 of
    # the 27 cases are within every tolerance, 2 within the oracle's noise (p99 TTFT +15.0 / +15.1 %
    # at 30 %), the three below with a chunked budget missing.
    # 9/3 flat2048 at 90 %: seed 3 only; within every tolerance against 4 seeds × 48,000 requests
    ("9/3", "flat2048", 0.9): "decode_batch -5.5 %; tpot_mean -5.2 % (seed 3; within tolerance over 4 seeds × 48,000)",
    # gated chunked: the rank backlog is its own queue with the renewal arrivals' long-run
    # dispersion (scheduler.rank_backlog); the router's token steering away from backlogged ranks
    # is not modelled (ranks as one pooled queue: −9 … −32 %; separate Poisson-fed queues:
    # +9 … +60 %). Since the thirtieth session the admitting iteration stalls for its own share of
    # the period's prompt tokens (the straddlers' rests come in the next iteration, which only
    # they wait for) and the wait without a backlog is the lattice's, not a gamma's: 6/2 at 30 /
    # 60 % and 9/3 at 30 % pass (mean TTFT +8.1 / +7.8 / +8.1 % before, +1.7 / −0.3 / +1.5 % now).
    # In the DES a tagged prompt finds a backlog on its rank in 4 % / 36 % of the cases at 6/2 30 /
    # 60 % (random router 7.5 % / 50 %), the model 10 % / 44 %: what is left at 9/3 60 %.
    # Near saturation (thirty-first session) the router's pull on a backlogged rank (its waiting
    # prompts displace decoding ones, whose completions are what refill it) bounds the backlog
    # (``scheduler.reflected_ou``): 6/2 at 90 % was +14.1 / +50.6 % (mean / p99 TTFT), 9/3 at 90 %
    # +164 / +427 %; against 4 seeds × 48,000 they are +5.0 % (within the noise) and −8.9 % mean.
    ("6/2", "chunk512", 0.9): "ttft_p99 +16.0 % (seed 3; within tolerance over 4 seeds × 48,000)",
    ("9/3", "chunk512", 0.6): "ttft_mean +9.1 %; ttft_p99 +21.8 %",
    ("9/3", "chunk512", 0.9): "ttft_mean -14.2 % (seed 3; -8.9 ± 1.5 % over 4 seeds × 48,000)",
}


def _balanced_params():
    cases = [(g, b, load) for g in GATES for b in BUDGETS for load in LOADS]
    return _gapped(cases, KNOWN_GAPS_BALANCED, lambda g, b, load: f"gate{g}-{b}-load{int(100 * load)}")


@pytest.mark.parametrize("gate, budget, load", list(_balanced_params()))
def test_balanced_router_matches_engine_des(gate, budget, load):
    """The balanced router (TensorRT-LLM's ADP routing, the engines' own) on 8 ranks, both sides."""
    _check(*compare(8, gate, budget, load, router="balanced"))


def test_des_decode_batch_is_the_sequences_past_their_first_token():
    """The DES's occupancy counts a request from its admitting iteration, its decode batch (what a
    decode iteration is costed at) from its first token: Little's law on the decode phase gives
    D = λ·E[last token − first token], and the occupancy exceeds D by the prompts in their prefill
    iteration(s), a part of their TTFT."""
    st = stats()
    eng = engine_for(8, "6/2", "chunk512")
    sim = des.simulate_engine(300.0, 8, eng, decode_time, S_TOK, (st.isl_points, st.isl_probs), OSL, n_requests=4000, seed=1)
    assert sim.decode_batch == pytest.approx(sim.rate * (sim.e2e_mean - sim.ttft_mean), rel=0.01)
    assert 0.0 < sim.occupancy - sim.decode_batch < sim.rate * sim.ttft_mean


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_flags_agree_when_limits_bind():
    """Above the cap / budget both sides flag the point (a stuck engine's p99 is inf, not NaN)."""
    eng = Engine(max_batch_size=16, gate_timeout_iters=0)
    r = closed(eng, 1, 15.5)
    sim = des.simulate_engine(float(r.rate[0]), 1, eng, decode_time, S_TOK, (stats().isl_points, stats().isl_probs), OSL,
                              n_requests=4000, seed=1)
    assert int(r.reason[0]) == Reason.BATCH_LIMIT and not des_ok(sim)
    assert not (np.isnan(sim.ttft_p) or np.isnan(sim.tpot_p))
    eng = Engine(max_num_tokens=600, chunked_prefill=False)
    r = closed(eng, 8, 200.0)
    sim = des.simulate_engine(float(r.rate[0]), 8, eng, decode_time, S_TOK, (stats().isl_points, stats().isl_probs), OSL,
                              n_requests=4000, seed=1)
    assert int(r.reason[0]) == Reason.TOKEN_BUDGET and not des_ok(sim)


# ---- exact reduction ------------------------------------------------------------------------------

def test_reduces_exactly_to_the_server_queue():
    """Gate off, one rank, no budget, every size captured: identical to serving.server."""
    from infersim import api, optimizations as opt
    from infersim.graph import Layout, resolve_formats
    from infersim.plan import Plan

    inp = api.load_inputs("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-server")
    base = Plan(hardware=inp.hardware, model=inp.model, formats=resolve_formats(inp.scenario.precision, inp.hardware))
    plan = opt.apply_all(base, [opt.make("fusion", {})])
    assert plan.engine == Engine()
    st = serving.WorkloadStats.from_workload(inp.scenario.workload, inp.model)
    lay = Layout(tp=8, ep=8, dp=1, pp=1)
    batch = np.array([1.0, 7.0, 64.0, 500.0, 3000.0])
    a, b = scheduler.server(plan, lay, batch, st), serving.server(plan, lay, batch, st)
    for k in ("rate", "tokens_per_s", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_p99", "prefill_share"):
        np.testing.assert_allclose(getattr(a, k), getattr(b, k), rtol=1e-12, err_msg=k)


@pytest.mark.parametrize("hw, model, scenario, n, layout", [
    ("b200", "deepseek-r1", "mlperf-deepseek-r1-server", 8, (8, 1, 8, 8)),        # gated ADP, a budget
    ("h200-sxm", "llama2-70b", "mlperf-llama2-70b-interactive", 8, (2, 1, 1, 1)),  # dense, ungated
    ("h100-sxm", "qwen3-vl-235b-a22b", "mlperf-qwen3-vl-235b-a22b-server", 8, (8, 1, 8, 1)),  # vision prompts
])
def test_stacked_step_pricing_and_means_only_change_no_number(monkeypatch, hw, model, scenario, n, layout):
    """``_server`` prices the decode step, its drift twin and the first context iteration in one
    stacked ``step_cost`` call, and ``means_only`` skips the percentiles: every figure equals the
    separate calls' exactly, and the means are the full call's."""
    from infersim import api
    from infersim.graph import Layout

    q = api.Query.build(hw, model, scenario, n, round="v6.0" if model != "llama2-70b" else "v5.1")
    plan = api.base_plan(q.inputs, q.software, q.layout, q.accelerators)
    st = serving.WorkloadStats.from_workload(q.inputs.scenario.workload, q.inputs.model)
    lay = Layout(*layout)
    batch = np.array([[1.0, 24.0, 300.0, 2000.0]])
    stacked = scheduler.server(plan, lay, batch, st)
    queue = scheduler.engine_queue

    def separate(*a, decode_times, **k):  # each decode step its own step_cost call, the prefill too
        return queue(*a, decode_time_at=lambda rows, b: decode_times([(rows, b)])[0], **k)

    monkeypatch.setattr(scheduler, "engine_queue", separate)
    separate = scheduler.server(plan, lay, batch, st)
    monkeypatch.undo()
    means = scheduler.server(plan, lay, batch, st, means_only=True)
    for k in ("rate", "tokens_per_s", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_p99", "iteration_s"):
        np.testing.assert_array_equal(getattr(stacked, k), getattr(separate, k), err_msg=k)
    np.testing.assert_array_equal(stacked.step.total, separate.step.total)
    for k in ("rate", "ttft_mean", "tpot_mean", "iteration_s"):
        np.testing.assert_array_equal(getattr(means, k), getattr(stacked, k), err_msg=k)
    assert np.all(np.isnan(means.ttft_p99)) and np.all(np.isnan(means.tpot_p99))


def test_batch_cap_never_exceeded_by_search():
    """No feasible point runs more sequences per attention rank than max_batch_size."""
    from infersim import api

    p = api.predict("gb300-nvl72", "gpt-oss-120b", "mlperf-gpt-oss-120b-server", 72, round="v6.0")
    g = p.result
    per_rank = g.batch[None, :] / g.layouts["dp"][:, None]
    assert p.plan.engine.max_batch_size == 896
    assert np.all(per_rank[g.ok] <= 896)


# ---- prediction at a load and validation at the measured load (CLI) --------------------------------

def _cli(argv):
    import json as _json

    from typer.testing import CliRunner

    from infersim.cli import app

    r = CliRunner().invoke(app, argv)
    return r.exit_code, (_json.loads(r.stdout) if r.exit_code == 0 and "json" in argv else r.output)


def test_run_qps_predicts_at_the_load_or_names_the_limit():
    base = ["run", "-H", "gb300-nvl72", "-m", "deepseek-r1", "-s", "mlperf-deepseek-r1-server", "-n", "72",
            "--tp", "8", "--ep", "8", "--dp", "8", "--disable", "mtp", "--format", "json"]
    code, d = _cli(base + ["--round", "v6.0", "--qps", "40"])
    assert code == 0 and d["feasible"]
    assert d["tokens_per_s"] == pytest.approx(40 * 3752.0, rel=1e-3)  # steady state: qps × mean OSL
    assert d["occupancy_per_rank"] <= 640 and d["ttft_p50_s"] <= d["ttft_s"] and d["tpot_p50_s"] <= d["tpot_s"]
    code, out = _cli(base[:-2] + ["--round", "v5.1", "--qps", "400"])
    assert code == 1 and "400 requests/s" in out
    code, out = _cli(["run", "-H", "b200", "-s", "mlperf-llama2-70b-offline", "--qps", "5"])
    assert code == 2 and "--qps" in out


def test_validate_at_load_reports_the_summary_keys(tmp_path):
    f = _bundled_op_subset(tmp_path, lambda r: r["benchmark"] == "deepseek-r1" and r["scenario"] == "Server", 3)
    code, d = _cli(["validate", "--at-load", "--data", str(f), "--format", "json"])
    assert code == 0
    for k in ("rows", "tpot_p50_median_ape", "ttft_p99_median_abs_error_s", "tpot_p99_median_ape", "per_row"):
        assert k in d
    assert d["rows"] == 3
    done = [r for r in d["per_row"] if not r["reason"]]
    assert done and all(r["completed_tokens_per_s"] < r["steady_tokens_per_s"] for r in done)
    bad = tmp_path / "bad.csv"
    bad.write_text("version,system\nv6.0,x\n")
    code, out = _cli(["validate", "--at-load", "--data", str(bad)])
    assert code == 2 and "missing required column" in out


# ---- host term of a Python executor ----------------------------------------------------------------

def test_host_term_is_per_streamed_response_and_only_for_python_executors():
    """host_time = host_s_per_stream_event × occupancy / stream_interval, added to every iteration;
    the presets give it only to engines whose executor loop runs in Python."""
    from infersim.optimizations.presets import load_preset

    v51, v60 = load_preset("v5.1"), load_preset("v6.0")
    ds = v51.engine_for("deepseek-r1", "server")
    assert ds.python_executor and ds.host_s_per_stream_event > 0
    assert v51.engine_for("llama2-70b", "server").host_s_per_stream_event == 0.0
    assert v60.engine_for("deepseek-r1", "server").stream_interval == 100
    eng = Engine(stream_interval=4, host_s_per_stream_event=10e-6)
    np.testing.assert_allclose(eng.host_time(np.array([0.0, 400.0])), [0.0, 1e-3])
    # the engine sees the host time as part of every iteration: same result as a slower decode step
    st = stats()
    pre = lambda n, imb: S_TOK * st.isl_mean * imb  # noqa: E731
    b = np.array([20.0, 80.0])
    with_host = scheduler.engine_queue(Engine(), 1, b, st, 1.0, Q, lambda r: decode_time(r) + eng.host_time(b), pre)
    slower = scheduler.engine_queue(Engine(), 1, b, st, 1.0, Q, lambda r: decode_time(r) + 1e-3 * b / 400.0, pre)
    np.testing.assert_allclose(with_host.tpot_mean, slower.tpot_mean, rtol=1e-12)
    assert np.all(with_host.tpot_mean > scheduler.engine_queue(Engine(), 1, b, st, 1.0, Q, decode_time, pre).tpot_mean)


def test_offline_pays_the_python_executors_host_time_too():
    """The Offline steady state runs the same executor loop: its iteration is the step cost plus
    ``Engine.host_time`` at the batch (v5.1 DeepSeek-R1 streamed every token from a Python executor,
    v6.0 every 100), and the tokens/s fall by exactly that share."""
    from dataclasses import replace

    from infersim import api
    from infersim.graph import Layout
    from infersim.serving import WorkloadStats

    q = api.Query.build("b200", "deepseek-r1", "mlperf-deepseek-r1-offline", 8, round="v5.1")
    plan = api.base_plan(q.inputs, q.software, q.layout, q.accelerators)
    assert plan.engine.python_executor and plan.engine.stream_interval == 1 and plan.engine.host_s_per_stream_event > 0
    st = WorkloadStats.from_workload(q.inputs.scenario.workload, q.inputs.model)
    lay, b = Layout(tp=8, ep=8, dp=8), np.array([512.0, 4096.0])
    off = serving.offline(plan, lay, b, st)
    bare = serving.offline(replace(plan, engine=replace(plan.engine, host_s_per_stream_event=0.0)), lay, b, st)
    host = plan.engine.host_time(b)
    np.testing.assert_allclose(off.step.total + host, b * plan.serving.tokens_per_step / off.tokens_per_s, rtol=1e-12)
    np.testing.assert_allclose(off.tokens_per_s / bare.tokens_per_s, bare.step.total / (bare.step.total + host), rtol=1e-12)
    assert np.all(host > 0) and host[1] == pytest.approx(8 * host[0])


def test_breakdown_reports_the_host_time_outside_the_step():
    """``breakdown.host_s`` is the Python executor's host time per iteration at the point's batch;
    Offline's TPOT is step + host (one token per step without MTP), and a disaggregated decode pool
    pays it too (its TPOT is (step + host) / tokens per step). A gated attention-DP Offline engine
    (``scheduler.offline``) reports its decode-only step; its TPOT is that iteration with the
    context iterations' share of the engine time on top."""
    from infersim import api

    off = api.predict("b200", "deepseek-r1", "mlperf-deepseek-r1-offline", 8, round="v5.1")
    b = off.breakdown
    assert off.config["dp"] > 1 and off.plan.engine.gate_timeout_iters > 0 and 0.0 < b["prefill_share"] < 0.2
    assert b["host_s"] == pytest.approx(off.plan.engine.host_time(off.config["batch"]), rel=1e-12) and b["host_s"] > 0.01
    assert off.metrics["tpot_mean_s"] == pytest.approx((b["step_s"] + b["host_s"]) / (1.0 - b["prefill_share"]), rel=1e-9)
    tp8 = api.predict("b200", "deepseek-r1", "mlperf-deepseek-r1-offline", 8, round="v5.1", tp=8, ep=8, dp=1)
    t = tp8.breakdown  # one attention rank: no gate, the mixed step of ``serving.offline``
    assert t["host_s"] > 0.0 and tp8.metrics["tpot_mean_s"] == pytest.approx(t["step_s"] + t["host_s"], rel=1e-9)
    dis = api.predict("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-interactive", 72, round="v6.0")
    assert dis.config["disaggregated"] and dis.breakdown["host_s"] > 0
    assert dis.metrics["tpot_mean_s"] == pytest.approx(
        (dis.breakdown["step_s"] + dis.breakdown["host_s"]) / dis.config["tokens_per_step"], rel=1e-9)
    llama = api.predict("b200", "llama2-70b", "mlperf-llama2-70b-offline", 8, round="v5.1")
    assert llama.breakdown["host_s"] == 0.0  # the C++ executor: off the critical path


def test_run_qps_reports_the_completed_rate_below_the_steady_state():
    base = ["run", "-H", "gb300-nvl72", "-m", "deepseek-r1", "-s", "mlperf-deepseek-r1-server", "-n", "72", "--tp", "8",
            "--ep", "8", "--dp", "8", "--disable", "mtp", "--round", "v6.0", "--qps", "40", "--format", "json"]
    code, short = _cli(base)
    code2, long = _cli(base + ["--samples", "400000"])
    assert code == code2 == 0
    assert short["issue_s"] == pytest.approx(600.0) and long["issue_s"] == pytest.approx(10_000.0)
    for d in (short, long):
        expect = d["tokens_per_s"] * d["issue_s"] / (d["issue_s"] + d["mean_latency_s"])
        assert d["completed_tokens_per_s"] == pytest.approx(expect, rel=1e-9)
    assert short["completed_tokens_per_s"] < long["completed_tokens_per_s"] < long["tokens_per_s"]
    code, out = _cli(base[:-2] + ["--samples", "0"])
    assert code == 2 and "--samples" in out


def test_run_engine_takes_the_runs_own_settings():
    """A run's engine settings (data/mlperf_engine_settings.csv) replace the preset's where given:
    vLLM's non-chunked 40,960-token budget, a TensorRT-LLM ADP run's gate; blanks keep the preset."""
    from infersim import at_load

    base = Engine(max_batch_size=512, max_num_tokens=3456, chunked_prefill=True, gate_timeout_iters=6, gate_wait_iters=2)
    e = at_load.run_engine(base, {"max_batch_size": "600", "max_num_tokens": "40960", "enable_chunked_prefill": "False",
                                  "enable_attention_dp": "", "cuda_graph_batch_sizes": "1..512 (11 sizes)"})
    assert (e.max_batch_size, e.max_num_tokens, e.chunked_prefill) == (600, 40960, False)
    assert (e.gate_timeout_iters, e.graph_sizes) == (6, None)
    e = at_load.run_engine(base, {"enable_attention_dp": "True", "adp_timeout_iters": "9", "adp_batching_wait_iters": "3",
                                  "cuda_graph_batch_sizes": "512 128 256", "stream_interval": "100"})
    assert (e.gate_timeout_iters, e.gate_wait_iters, e.graph_sizes, e.stream_interval) == (9, 3, (128, 256, 512), 100)
    assert at_load.run_engine(base, {"enable_attention_dp": "False"}).gate_timeout_iters == 0
    runs = at_load.load_engine_settings()
    amd = runs[("v5.1", "AMD", "8xMI300X_2xEPYC_9575F", "llama2-70b-99", "Interactive")]
    assert at_load.run_engine(Engine(), amd).max_num_tokens == 40960
    assert at_load.run_engine(Engine(), amd).decode_steps == 8  # extra: num_scheduler_steps=8
    assert at_load.run_engine(Engine(), {"extra": "block_size=16; async_scheduling=True"}).decode_steps == 1
    # CUDA graphs: none recorded -> eager; on without sizes -> every size; piecewise also runs prompts
    assert at_load.run_engine(base, {"cuda_graphs": "False"}).graph_sizes == ()
    e = at_load.run_engine(Engine(graph_sizes=()), {"cuda_graphs": "True (FULL_AND_PIECEWISE)"})
    assert e.graph_sizes is None and e.graphs_capture_prompts
    assert not at_load.run_engine(Engine(), {"cuda_graphs": "True"}).graphs_capture_prompts
    assert at_load.run_engine(Engine(), {"cuda_graphs": "True", "extra": "torch_compile piecewise CUDA graph"}).graphs_capture_prompts
    # the harness's request dispatch: recorded, else the harness's default; other harnesses keep the preset's
    nv = {"harness": "NVIDIA harness (TRT-LLM)"}
    assert at_load.run_engine(base, {**nv, "scenario": "Server"}).instance_dispatch == "load_balancing"
    assert at_load.run_engine(base, {**nv, "scenario": "Interactive"}).instance_dispatch == "round_robin"
    assert at_load.run_engine(base, {**nv, "scenario": "Server", "traffic_distribution_policy": "isl_load_balancing"}
                              ).instance_dispatch == "fewest_tokens"
    assert at_load.run_engine(base, amd).instance_dispatch == "load_balancing"  # AMD harness: shortest queue
    assert at_load.run_engine(base, {"harness": "Red Hat vLLM SUT", "scenario": "Server"}).instance_dispatch == "random"


def test_validate_at_load_run_engine_flag(tmp_path):
    import csv as _csv

    from infersim import at_load

    rows = list(_csv.DictReader(at_load.bundled_data().open()))
    keep = [r for r in rows if r["submitter"] == "AMD" and r["scenario"] == "Server" and r["benchmark"] == "llama2-70b-99"][:1]
    f = tmp_path / "ops.csv"
    with f.open("w", newline="") as fh:
        w = _csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(keep)
    code, d = _cli(["validate", "--at-load", "--run-engine", "--data", str(f), "--format", "json"])
    assert code == 0 and d["per_row"][0]["run_engine"] and d["rows_with_run_engine"] == d["predicted_rows"]
    code, d = _cli(["validate", "--at-load", "--data", str(f), "--format", "json"])
    assert code == 0 and not d["per_row"][0]["run_engine"]
    code, out = _cli(["validate", "--run-engine"])
    assert code == 2 and "--at-load" in out


def test_run_layout_takes_the_runs_own_parallelism():
    """A matched run's TP/PP/EP and attention DP (data/mlperf_engine_settings.csv) set the layout
    it is predicted on; a MoE run without an expert-parallel size or a layout that does not fit is
    left to the search."""
    from infersim import api, at_load
    from infersim.serving import WorkloadStats

    p = api.predict("mi300x", "llama2-70b", "mlperf-llama2-70b-server", 8, round="v5.1", disable=["disagg"])
    st = WorkloadStats.from_workload(p.inputs.scenario.workload, p.inputs.model)
    lay = at_load.run_layout(p.plan, {"tensor_parallel_size": "1"}, st, 8)
    assert (lay["tp"], lay["pp"], lay["ep"], lay["dp"], lay["replicas"]) == (1, 1, 1, 1, 8) and lay["max_batch"] > 0
    assert at_load.run_layout(p.plan, {"tensor_parallel_size": "3"}, st, 8) is None  # 64 heads: TP3 does not divide
    assert at_load.run_layout(p.plan, {}, st, 8) is None
    q = api.predict("b200", "deepseek-r1", "mlperf-deepseek-r1-server", 8, round="v5.1", disable=["disagg"])
    st = WorkloadStats.from_workload(q.inputs.scenario.workload, q.inputs.model)
    lay = at_load.run_layout(q.plan, {"tensor_parallel_size": "8", "moe_expert_parallel_size": "8",
                                      "enable_attention_dp": "True"}, st, 8)
    assert (lay["tp"], lay["ep"], lay["dp"], lay["replicas"]) == (8, 8, 8, 1)
    assert at_load.run_layout(q.plan, {"tensor_parallel_size": "8"}, st, 8) is None


def test_rank_backlog_matches_a_lindley_recursion():
    """The carried backlog and the chance to carry one (scheduler.capped_tokens) against a Monte
    Carlo of one rank's queue, W' = max(W + A − c, 0), A compound Poisson prompt tokens."""
    st = stats()
    rng = np.random.default_rng(0)
    x, p = np.asarray(st.isl_points), np.asarray(st.isl_probs) / np.sum(st.isl_probs)
    for m, c in ((0.65, 464.0), (1.32, 415.0), (1.88, 464.0), (7.27, 1796.0)):  # loads 0.31, 0.71, 0.90, 0.90
        n = 200_000
        cnt = rng.poisson(m, n)
        a = np.bincount(np.repeat(np.arange(n), cnt), weights=x[rng.choice(len(x), cnt.sum(), p=p)], minlength=n)
        w, ws = 0.0, np.empty(n)
        for i, ai in enumerate(a.tolist()):
            ws[i] = w
            w = max(w + ai - c, 0.0)
        _, _, p_over, backlog, stable, _ = scheduler.capped_tokens(st, np.array([m]), np.array([c]), 1)
        assert stable[0]
        assert backlog[0] == pytest.approx(ws.mean(), rel=0.15)
        assert p_over[0] == pytest.approx((ws > 0).mean(), abs=0.05)


def test_at_load_takes_the_runs_own_output_length():
    """The run's tokens per sample (what its model generated) sets the mean OSL of the load, the
    distribution's shape kept; a longer output needs more sequences in flight to carry the same
    request rate (Little's law), so the at-load occupancy and TPOT rise with it."""
    from infersim import api
    from infersim.graph import Layout
    from infersim.serving import WorkloadStats

    p = api.predict("h200-sxm", "llama2-70b", "mlperf-llama2-70b-server", 8, round="v5.1", disable=["disagg"])
    st = WorkloadStats.from_workload(p.inputs.scenario.workload, p.inputs.model)
    short = st.with_output_mean(274.3)
    assert short.osl_mean == pytest.approx(274.3) and short.isl_mean == st.isl_mean
    k = 274.3 / st.osl_mean
    np.testing.assert_allclose(short.osl_points, st.osl_points * k)
    assert short.osl_sq == pytest.approx(st.osl_sq * k * k) and short.osl_p99 == pytest.approx(st.osl_p99 * k)
    assert st.with_output_mean(None) is st and st.with_output_mean(0.0) is st
    c = p.config
    lay = Layout(tp=c["tp"], pp=c["pp"], ep=c["ep"], dp=c["dp"])
    occ = []
    for s in (short, st.with_output_mean(310.0)):
        _, _, m = scheduler.operating_point(p.plan, lay, c["replicas"], s, p.inputs.scenario, 80.0, c["max_batch"], 8)
        occ.append((m["occupancy"], m["tpot_p50_s"]))
    assert occ[0][0] < occ[1][0] and occ[0][1] < occ[1][1]


# ---- multi-step scheduling (vLLM V0 num_scheduler_steps) ------------------------------------------

MULTI_STEP_GAPS = {  # (steps, budget, load) -> measured miss (model − DES)/DES, seed 3
    # the DES itself moves ±5-10 % between seeds here: against 4 seeds × 48,000 requests the model
    # is at TTFT mean +5.1 % (90 %) and p99 +14.8 % (60 %)
    (9, "flat2048", 0.6): "ttft_p99 +15.2 %",
    (9, "flat2048", 0.9): "ttft_mean -10 %",
}


def multi_step_cases():
    """(steps, budget, load) of the multi-step grid."""
    return [(n, b, load) for n in (4, 9) for b in ("none", "flat2048") for load in LOADS]


def multi_step_engine(steps: int, budget: str) -> Engine:
    """A multi-step case's engine: one rank, no gate, admission every ``steps`` iterations."""
    mnt, chunked = BUDGETS[budget]
    return Engine(max_batch_size=CAP[1], max_num_tokens=mnt, chunked_prefill=chunked, decode_steps=steps)


def multi_step_placed(steps: int, budget: str, load: float):
    """(engine, occupancy, closed form) of a multi-step case at ``load`` of its capacity."""
    eng = multi_step_engine(steps, budget)
    b = np.geomspace(1.0, CAP[1], 160)
    r = closed(eng, 1, b)
    return (eng, *at_load(eng, 1, b, np.where(r.ok, r.rate, 0.0), load))


def _multi_step_params():
    return _gapped(multi_step_cases(), MULTI_STEP_GAPS, lambda n, b, load: f"steps{n}-{b}-load{int(100 * load)}")


@pytest.mark.parametrize("steps, budget, load", list(_multi_step_params()))
def test_multi_step_scheduling_matches_engine_des(steps, budget, load):
    """Admission only every ``decode_steps`` iterations (one rank, no gate): the closed form's fixed
    gate period against des.simulate_engine, same tolerances as the ADP grid. A prompt waits for
    the next scheduler call, uniformly over the period, so TTFT grows with the steps while the
    iteration cost, and with it TPOT and the throughput, stays as in single-step scheduling."""
    eng, batch, m = multi_step_placed(steps, budget, load)
    st = stats()
    sim = des.simulate_engine(float(m.rate[0]), 1, eng, decode_time, S_TOK, (st.isl_points, st.isl_probs), OSL,
                              n_requests=N_REQUESTS, percentile=100 * Q, seed=3)
    assert bool(m.ok[0]) == des_ok(sim)
    for k, sk in PAIRS.items():
        mv = float(serving.decode_batch(batch, 1.0, st)) if k == "decode_batch" else float(np.ravel(getattr(m, k))[0])
        assert mv == pytest.approx(getattr(sim, sk), rel=TOL[k]), k
    one = closed(dataclasses.replace(eng, decode_steps=1), 1, batch)
    assert float(m.ttft_mean[0]) > float(one.ttft_mean[0]) * (1.0 + 0.2 * (steps - 1))
    assert float(m.tpot_mean[0]) == pytest.approx(float(one.tpot_mean[0]), rel=0.05)


def test_multi_step_engine_settings_come_from_the_preset():
    """The v5.1 AMD vLLM runs' multi-step settings (mlperf_engine_settings.csv extra column) reach
    the engine per hardware and scenario; other hardware and Offline keep single-step scheduling."""
    from infersim.optimizations.presets import load_preset

    v51 = load_preset("v5.1")
    assert v51.engine_for("llama2-70b", "server", "mi300x").decode_steps == 9
    assert v51.engine_for("llama2-70b", "interactive", "mi300x").decode_steps == 8
    assert v51.engine_for("llama2-70b", "interactive", "mi325x").decode_steps == 1
    assert v51.engine_for("mixtral-8x7b", "server", "mi325x").decode_steps == 10
    assert v51.engine_for("llama2-70b", "offline", "mi300x").decode_steps == 1
    assert v51.engine_for("llama2-70b", "server", "b200").decode_steps == 1
    assert Engine().decode_steps == 1


def test_validate_at_load_flags_disaggregated_runs_without_run_engine(tmp_path):
    """A run whose config says it ran disaggregated (NVIDIA's v6.0 GB300 x72 llama2-70b Interactive)
    is flagged and left out of the aggregated-runs medians also when it is predicted with the
    round preset's engine."""
    f = _bundled_op_subset(tmp_path, lambda r: r["version"] == "v6.0" and r["submitter"] == "NVIDIA"
                           and r["scenario"] == "Interactive" and r["benchmark"] == "llama2-70b-99"
                           and r["system"].startswith("GB300"), 1)
    code, d = _cli(["validate", "--at-load", "--data", str(f), "--format", "json"])
    assert code == 0 and not d["per_row"][0]["run_engine"] and d["per_row"][0]["disaggregated_run"]
    assert d["disaggregated_runs"] == d["predicted_rows"] == 1 and d["tpot_p50_median_ape_aggregated_runs"] is None


def _bundled_op_subset(tmp_path, keep, n: int):
    """The first ``n`` bundled operating points for which ``keep(row)`` holds, as a CSV in tmp_path."""
    import csv as _csv

    from infersim import at_load

    rows = list(_csv.DictReader(at_load.bundled_data().open()))
    picked = [r for r in rows if keep(r)][:n]
    assert picked
    f = tmp_path / "ops.csv"
    with f.open("w", newline="") as fh:
        w = _csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(picked)
    return f


def test_window_variance_of_the_decode_count():
    """One output length: the count's autocovariance falls linearly over a request's own window,
    so its window average keeps 2/3 of the count's (Poisson) variance; a longer request's window
    averages more of the count's fluctuation away than a shorter one's."""
    v, v99 = serving._window_var(None, None, 301.0, 301.0, 1.0)
    assert v[0] == pytest.approx(2 / 3) and v99 == pytest.approx(2 / 3)
    v, _ = serving._window_var((101.0, 501.0), (0.5, 0.5), 301.0, 501.0, 1.0)
    assert v[1] < v[0]


def test_prefill_stalls_cluster_the_decode_count():
    """A prompt's stall lengthens the iteration that prefills it, which gathers more arrivals, whose
    stalls lengthen the next: the count of arrivals per window of iterations (so the decode count)
    is 1/(1 − ρ)² times as variable per unit mean as Poisson arrivals (serving.decode_drift's
    ``rho``). The oracle with a flat decode step (no feedback through the step's slope), one output
    length, no budget, ρ = 0.35: the count's time-averaged variance per unit mean against
    1/(1 − ρ)² (2.37; 1 for Poisson arrivals). Measured 2.67 (seed 4: 2.48); at ρ = 0.2 1.54 / 1.56
    against 1.56, at 0.5 5.0 / 4.5 against 4.0 (the prompts' length spread makes the offspring
    count more variable than Poisson's, more so as ρ grows)."""
    st = dataclasses.replace(stats(), osl_mean=128.0, osl_sq=128.0**2, osl_points=np.array([128.0]),
                             osl_probs=np.ones(1), osl_p99=128.0)
    t_d, s_prompt = 0.030, 0.030  # flat decode step; a mean prompt's stall
    rate = 0.35 / s_prompt
    eng = Engine(max_batch_size=4096, max_num_tokens=None, chunked_prefill=True, gate_timeout_iters=0,
                 gate_wait_iters=0, graph_sizes=None)
    trace = []
    des.simulate_engine(rate, 1, eng, lambda rows: np.full(np.shape(rows), t_d), s_prompt / st.isl_mean,
                        (st.isl_points, st.isl_probs), (st.osl_points, st.osl_probs), n_requests=N_REQUESTS,
                        seed=3, trace=trace)
    b = np.array([t[0][0] for t in trace], dtype=float)
    w = np.array([t[1] for t in trace])
    w = w / w.sum()
    mean = float(np.sum(w * b))
    rho = rate * s_prompt
    assert float(np.sum(w * (b - mean) ** 2)) / mean == pytest.approx(1.0 / (1.0 - rho) ** 2, rel=0.2)
    # the drift's amplitude carries the factor's root
    a0 = serving.decode_drift(1e-4, 60.0, t_d, 1.0, st, Q)[0]
    a1 = serving.decode_drift(1e-4, 60.0, t_d, 1.0, st, Q, rho)[0]
    assert a1 / a0 == pytest.approx(1.0 / (1.0 - rho), rel=1e-12)


DRIFT_OSL = (np.array([200.0, 300.0, 400.0]), np.full(3, 1 / 3))


@pytest.mark.parametrize("load", (0.3, 0.6, 0.9))
def test_tpot_p99_of_long_outputs_carries_the_decode_counts_drift(load):
    """MLPerf-like output lengths (200-400 tokens), one rank, no budget, against the DES: a request's
    TPOT averages its iterations' fast noise away, but not the drift of the decode count over its
    life (serving.decode_drift). Measured (seed 3, 12,000 requests): p99 TPOT −0.6 … −1.9 % (cap
    512: −0.6 … −2.1 %); without the drift term −4.9 … −9.1 % (the closed form's p99/mean 1.02-1.03
    against the DES's 1.07-1.10)."""
    st = dataclasses.replace(stats(), osl_mean=300.0, osl_sq=float(np.mean(DRIFT_OSL[0] ** 2)), osl_points=DRIFT_OSL[0],
                             osl_probs=DRIFT_OSL[1], osl_p99=400.0)
    eng = Engine(max_batch_size=256, max_num_tokens=None, chunked_prefill=True, gate_timeout_iters=0, gate_wait_iters=0,
                 graph_sizes=None)
    m, sim = one_rank_at_load(eng, st, decode_time, S_TOK, DRIFT_OSL, load)
    assert float(m.tpot_p99[0]) / sim.tpot_p - 1.0 == pytest.approx(0.0, abs=0.04)
    assert float(m.tpot_mean[0]) / sim.tpot_mean - 1.0 == pytest.approx(0.0, abs=TOL["tpot_mean"])


LONG_T0, LONG_T1, LONG_S_TOK = 0.030, 100e-6, 45e-6
"""Synthetic costs for Llama-3.1-405B-like prompts (mean 9,429 tokens, MLPerf Interactive) over a
1,536-token chunked budget: a full chunk adds ~69 ms to a ~30 ms decode iteration."""


@pytest.mark.parametrize("load", (0.3, 0.6))
def test_long_prompts_over_a_chunked_budget(load):
    """One rank, prompts several budgets long (the 405B runs: 9,429 tokens mean over 1,536): the first
    context iteration of a prompt takes at most one budget and the K after it the rest
    (scheduler.first_take). Priced as the whole prompts' stall plus the K iterations, the tokens past
    the first chunk counted twice: mean TTFT +49 / +38 % at 30 / 60 % (20,000 requests).

    A prompt's chunks also land in consecutive iterations, so over a request's window the prefill
    varies with the whole prompts that arrive in it (compound Poisson of their prefill), not with the
    per-iteration take, which is about one budget in every context iteration when prompts are long:
    p99 TPOT −16 / −23 / −12 % at 30 / 60 / 90 % with the per-iteration variance.

    Measured against 4 seeds × 48,000 requests (2026-11-26): mean TTFT +3.6 / +2.2 / −6.6 ± 5.4 % at
    30 / 60 / 90 %, p99 +8.5 / +2.7 / −13.8 ± 10.8 %, mean TPOT −1.0 / −1.9 / −2.4 %, p99 TPOT −5.3 /
    −7.9 / +15.4 %. 90 % is left out: there 12,000 requests of a DES whose outputs run 685 tokens
    scatter ±7 % between seeds, and the p99 TPOT overshoots. Since the prompts behind a carried
    backlog keep its exponential tail (2026-11-29): mean TTFT +3.6 / +2.4 / −2.4 %, p99 +13.4 / +6.8 /
    −9.6 %: the tail is longer at every load, too long at 30 % where the gamma of the prompt's own
    length already overstates a bounded one."""
    st = serving.WorkloadStats.from_workload(catalog.load("scenario", "mlperf-llama3.1-405b-interactive").workload)
    step = lambda rows: LONG_T0 + LONG_T1 * np.asarray(rows, dtype=float)  # noqa: E731
    eng = Engine(max_batch_size=256, max_num_tokens=1536, chunked_prefill=True, gate_timeout_iters=0,
                 gate_wait_iters=0, graph_sizes=None)
    m, sim = one_rank_at_load(eng, st, step, LONG_S_TOK, (st.osl_points, st.osl_probs), load)
    got = {k: float(np.ravel(getattr(m, k))[0]) / v - 1.0 for k, v in
           (("ttft_mean", sim.ttft_mean), ("ttft_p99", sim.ttft_p), ("tpot_mean", sim.tpot_mean),
            ("tpot_p99", sim.tpot_p))}
    bad = {k: f"{100 * e:+.1f} %" for k, e in got.items() if abs(e) > TOL[k]}
    assert not bad, f"outside tolerance: {bad}"


def one_rank_at_load(eng: Engine, st, step, s_tok: float, osl, load: float):
    """The closed form on one rank at ``load`` of its capacity (step ``step(rows)``, ``s_tok`` per
    prompt token) and the DES at its arrival rate (the test's oracle: N_REQUESTS requests, seed 3)."""
    pre = lambda n, imb: s_tok * st.isl_mean * imb  # noqa: E731
    b = np.geomspace(1.0, 256.0, 200)
    r = scheduler.engine_queue(eng, 1, b, st, 1.0, Q, step, pre)
    rate = np.where(r.ok, r.rate, 0.0)
    i = int(np.argmax(rate))
    batch = float(np.interp(load * rate[i], rate[: i + 1], b[: i + 1]))
    m = scheduler.engine_queue(eng, 1, np.array([batch]), st, 1.0, Q, step, pre)
    sim = des.simulate_engine(float(m.rate[0]), 1, eng, step, s_tok, (st.isl_points, st.isl_probs), osl,
                              n_requests=N_REQUESTS, percentile=100 * Q, seed=3)
    return m, sim


# ---- Offline: the saturated engine ---------------------------------------------------------------

OFFLINE_OSL = (np.array([250.0, 1000.0, 2000.0]), np.array([0.3, 0.4, 0.3]))


@cache
def offline_stats() -> serving.WorkloadStats:
    """The module's prompts with long outputs (mean 1,075 tokens), so that a rank at its cap frees
    about 0.12 slots an iteration, as DeepSeek-R1's Offline ranks do (512 sequences, 3,752 tokens)."""
    return with_outputs(stats(), OFFLINE_OSL)


def mixed_step_rate(st: serving.WorkloadStats, cap: int, d: int) -> float:
    """Tokens/s of ``serving.offline``'s mixed step with these synthetic costs at the cap: every
    iteration carries the B·L/OSL replacement prompts, the busiest rank max(1, d/n) × the mean share."""
    n = cap * d / st.osl_mean
    rows = scheduler._pad((1, 2, 4, 8, 16, 32, 64, 128), cap)
    return cap * d / (decode_time(rows) + S_TOK * st.isl_mean * n * serving.rank_imbalance(n, d) / d)


@pytest.mark.parametrize("gate", ["500/10", "6/2", "off"])
def test_saturated_engine_is_the_offline_steady_state(gate):
    """Offline with attention DP (``scheduler.offline``) is the engine of ``engine_queue`` at the
    batch cap: the DES fed faster than it serves (every rank always has prompts waiting, as under
    LoadGen's Offline query) runs at the closed form's throughput and iteration time, where the
    mixed step of ``serving.offline`` (every iteration carries the B·L/OSL prompts that replace the
    finished ones, the busiest rank max(1, d/n) × the mean share) is 15 % low behind the 500/10 gate
    of the B200 / B300 DeepSeek-R1 Offline recipes. Measured 2026-11-27 (seed 3, 24,000 requests):
    DES / closed form 0.997 (500/10), 1.000 (6/2), 1.001 (off); mixed step / DES 0.85, 0.89, 0.96."""
    st = offline_stats()
    timeout, wait = {"500/10": (500, 10), "6/2": (6, 2), "off": (0, 0)}[gate]
    eng = Engine(max_batch_size=128, gate_timeout_iters=timeout, gate_wait_iters=wait,
                 graph_sizes=(1, 2, 4, 8, 16, 32, 64, 128), rank_router="balanced")
    d, full = 8, 128.0 * 8
    r = scheduler.engine_queue(eng, d, np.array([full]), st, 1.0, Q, decode_time,
                               lambda n, imb: S_TOK * st.isl_mean * imb / d)
    sim = des.simulate_engine(float(r.rate[0]) * 1.3, d, eng, decode_time, S_TOK, (st.isl_points, st.isl_probs),
                              OFFLINE_OSL, n_requests=24_000, seed=3)
    assert sim.occupancy > 0.98 * full  # saturated: the ranks stay at their cap
    assert sim.tokens_per_s == pytest.approx(float(r.tokens_per_s[0]), rel=0.02)
    assert sim.iteration_mean == pytest.approx(float(np.ravel(r.iteration_s)[0]), rel=0.02)
    if gate == "500/10":
        assert mixed_step_rate(st, 128, d) < 0.9 * sim.tokens_per_s


def test_offline_with_attention_dp_runs_the_engine():
    """``scheduler.offline``: one attention rank is ``serving.offline`` exactly; with d > 1 the
    tokens/s are the engine's (``server`` at the same occupancy), its reported step the decode-only
    iteration, and the engine time on context iterations is reported."""
    from infersim import api
    from infersim.graph import Layout

    q = api.Query.build("b200", "deepseek-r1", "mlperf-deepseek-r1-offline", 8, round="v6.0")
    plan = api.base_plan(q.inputs, q.software, q.layout, q.accelerators)
    st = serving.WorkloadStats.from_workload(q.inputs.scenario.workload, q.inputs.model)
    b = np.array([1024.0, 4096.0])
    one = Layout(tp=8, ep=8, dp=1)
    np.testing.assert_array_equal(scheduler.offline(plan, one, b, st).tokens_per_s, serving.offline(plan, one, b, st).tokens_per_s)
    adp = Layout(tp=8, ep=8, dp=8)
    off, eng = scheduler.offline(plan, adp, b, st), scheduler.server(plan, adp, b, st, means_only=True)
    np.testing.assert_allclose(off.tokens_per_s, eng.tokens_per_s, rtol=1e-12)
    assert np.all(off.prefill_share > 0) and np.all(off.step.total < serving.offline(plan, adp, b, st).step.total)
    # the measured direction: the gated engine is faster than the mixed step at the recipe's 512 a rank
    assert off.tokens_per_s[1] > 1.05 * serving.offline(plan, adp, b, st).tokens_per_s[1]


@pytest.mark.parametrize("cap", [96, 32])
def test_ungated_attention_dp_offline_is_the_engine_not_the_mixed_step(cap):
    """Without the gate every iteration admits, and at 0.4-1.3 prompts per rank per iteration (this
    module's short outputs) the busiest of 8 ranks holds the largest of 8 compound Poisson sums,
    far above the mixed step's max(1, d/n) × the mean share: the DES fed faster than it serves
    runs at the closed form's rate, the mixed step 27-46 % above it. Measured 2026-11-27 (seed 3,
    24,000 requests): closed form / DES 0.962 (cap 96) and 0.997 (cap 32); mixed / DES 1.46, 1.27.
    Why gpt-oss-120b Offline on MI355X (tests/golden) left DEP8 for TP1 × 8."""
    st = stats()
    eng = Engine(max_batch_size=cap, graph_sizes=(1, 2, 4, 8, 16, 32, 64, 128), rank_router="balanced")
    d = 8
    r = closed(eng, d, float(cap * d))
    sim = des.simulate_engine(float(r.rate[0]) * 1.3, d, eng, decode_time, S_TOK, (st.isl_points, st.isl_probs), OSL,
                              n_requests=24_000, seed=3)
    assert sim.tokens_per_s == pytest.approx(float(r.tokens_per_s[0]), rel=0.05)
    assert mixed_step_rate(st, cap, d) > 1.2 * sim.tokens_per_s


@pytest.mark.parametrize("ahead", [0.5, 0.52, 2.3])
def test_gated_wait_without_a_backlog_is_the_compound_poisson_tail(ahead):
    """``scheduler._ahead_wait_sums`` (the gated chunked budget wait without a backlog) against the
    compound Poisson sum of the prompts ahead built here by direct convolution: P(A + ov ≥ k·c)
    for every k, c = 500 free tokens + the overshoot ov (``engine_queue`` passes c + ov)."""
    st = stats()
    x = np.round(np.asarray(st.isl_points)).astype(int)
    p = np.asarray(st.isl_probs) / np.sum(st.isl_probs)
    one = np.bincount(x, weights=p)
    n_max = 40
    pmf, term = np.zeros(n_max * len(one)), np.zeros(n_max * len(one))
    term[0] = 1.0
    for n in range(n_max):  # Σ_n Poisson(n; ahead)·(ISL pmf)^{*n}
        pmf += np.exp(-ahead) * ahead**n / math.factorial(n) * term
        term = np.convolve(term, one)[:len(term)]
    ov = st.prompt_overshoot
    cap = 500.0 + ov
    k = np.arange(1, 40)
    tail = np.array([pmf[int(np.ceil(t)):].sum() for t in k * cap - ov])
    s, s2, p1 = scheduler._ahead_wait_sums(st, np.array([ahead]), np.array([cap]), np.array([ov]))
    assert p1[0] == pytest.approx(tail[0], abs=2e-3)
    assert s[0] == pytest.approx(tail.sum(), abs=2e-3)
    assert s2[0] == pytest.approx(((2 * k - 1) * tail).sum(), abs=3e-3)
    # off the table's count axis the caller keeps its gamma: NaN here
    assert np.isnan(scheduler._ahead_wait_sums(st, np.array([1e3]), np.array([cap]), np.array([ov]))[0][0])


def test_des_request_record_is_consistent_and_changes_nothing():
    """``des.simulate_engine(requests=...)`` (benchmarks/gated_chunked_wait.py) records each request's
    iterations and the tokens ahead of it without changing the run: the same figures as without it;
    every admitted request is admitted no earlier than it arrived and gets its first token no earlier
    than its admission; a prompt's tokens ahead include the backlog among them; and the measured
    requests of a gated chunked engine (6/2, 512 tokens, random router at 60 % load) all saw an admission."""
    st = stats()
    eng, batch, r = placed(8, "6/2", "chunk512", 0.6)
    args = (float(r.rate[0]), 8, eng, decode_time, S_TOK, (st.isl_points, st.isl_probs), OSL)
    plain = des.simulate_engine(*args, n_requests=3000, seed=5)
    rec, tr = {}, []
    sim = des.simulate_engine(*args, n_requests=3000, seed=5, requests=rec, trace=tr)
    assert dataclasses.replace(sim, wall_s=0.0) == dataclasses.replace(plain, wall_s=0.0)
    m = rec["measured"]
    assert m.sum() == sim.n_requests
    adm, arr, fst = rec["admit_iter"][m], rec["arrival_iter"][m], rec["first_iter"][m]
    assert np.all(adm >= arr) and np.all(fst >= adm) and np.all(arr >= 0)
    ahead, back = rec["ahead_tokens"][m], rec["backlog_tokens"][m]
    assert np.all(ahead >= 0) and np.all(back >= 0) and np.all(back <= ahead)
    assert 0.0 < np.mean(fst > adm) < 1.0  # some prompts straddle the budget, most do not
    # the trace: one entry per measured iteration, 8 ranks' decoding counts and a positive duration
    assert all(len(c) == 8 and t > 0 for c, t in tr)


def test_reflected_ou_backlog_moments_against_its_density():
    # the backlog pulled back in proportion to itself: mean and squared CV against the stationary
    # density integrated on a grid; without the pull, Kingman's mean and the exponential's CV² of 1
    k, drift, pull = np.array([4830.0, 925.0]), np.array([14.5, 63.5]), np.array([0.0613, 0.0528])
    mean, cv2 = scheduler.reflected_ou(k, drift, pull)
    for i in range(2):
        s2 = 2.0 * drift[i] * k[i]
        x = np.linspace(0.0, 60.0 * k[i], 600_001)
        f = np.exp(-2.0 * drift[i] / s2 * x - pull[i] / s2 * x * x)
        z = np.trapezoid(f, x)
        m = np.trapezoid(x * f, x) / z
        assert float(mean[i]) == pytest.approx(m, rel=1e-5)
        assert float(cv2[i]) == pytest.approx((np.trapezoid(x * x * f, x) / z - m * m) / (m * m), rel=1e-4)
    assert np.all(mean < k) and np.all(cv2 < 1.0)
    m0, c0 = scheduler.reflected_ou(k, drift, 0.0)
    np.testing.assert_allclose(m0, k) and np.testing.assert_allclose(c0, 1.0)


def test_gamma_plus_exponential_survival_and_density():
    """``scheduler._gamma_exp_survival``: P(Y + E > t) of a gamma Y of mean m − τ and variance v − τ²
    and an exponential E of mean τ, against a Monte Carlo of the sum, and its density against the
    survival's slope; τ = 0 is the gamma of m and v."""
    rng = np.random.default_rng(7)
    m, v, tau = 0.10, 0.003, 0.05
    k, th = (m - tau) ** 2 / (v - tau**2), (v - tau**2) / (m - tau)
    x = rng.gamma(k, th, 2_000_000) + rng.exponential(tau, 2_000_000)
    t = np.array([0.05, 0.1, 0.2, 0.3, 0.4])
    sf, dens = scheduler._gamma_exp_survival(t, np.full(5, m), np.full(5, v), np.full(5, tau))
    assert sf == pytest.approx([(x > u).mean() for u in t], abs=2e-3, rel=0.02)
    h = 1e-6
    slope = (scheduler._gamma_exp_survival(t - h, m, v, tau)[0] - scheduler._gamma_exp_survival(t + h, m, v, tau)[0]) / (2 * h)
    assert dens == pytest.approx(slope, rel=1e-4)
    g = rng.gamma(m * m / v, v / m, 2_000_000)
    sf0, _ = scheduler._gamma_exp_survival(t, np.full(5, m), np.full(5, v), np.zeros(5))
    assert sf0 == pytest.approx([(g > u).mean() for u in t], abs=2e-3, rel=0.02)
    assert sf[-1] > 3 * sf0[-1]  # the exponential's tail: far longer than the gamma's of the same moments


def test_carried_backlog_keeps_its_exponential_tail(monkeypatch):
    """One rank, chunked 512-token budget at 90 % load: the prompts behind a carried backlog wait for
    it to be worked off, an exponential tail (Cramér-Lundberg), which the backlog's own decoders
    lengthen (each finished prompt decodes on, taking budget and lengthening the iteration). Priced
    as one gamma of the waiting prompts' two moments at a fixed slack, the p99 TTFT was 21 % short
    of 8 seeds × 48,000 requests of the DES (0.246 against 0.312 s); now within the grid's 15 %."""
    eng, batch, r = placed(1, "off", "chunk512", 0.9)
    st = stats()
    sims = [des.simulate_engine(float(r.rate[0]), 1, eng, decode_time, S_TOK, (st.isl_points, st.isl_probs), OSL,
                                n_requests=48_000, percentile=100 * Q, seed=s) for s in (1, 2, 3, 4)]
    p99 = float(np.mean([x.ttft_p for x in sims]))
    assert float(r.ttft_p99[0]) == pytest.approx(p99, rel=TOL["ttft_p99"])
    assert float(r.ttft_mean[0]) == pytest.approx(float(np.mean([x.ttft_mean for x in sims])), rel=TOL["ttft_mean"])
    # without either piece the p99 falls short again
    monkeypatch.setattr(scheduler, "backlog_feedback", lambda *a, **k: 1.0)
    short = closed(eng, 1, batch)
    monkeypatch.setattr(scheduler, "_carried_quantile", lambda *a: a[-1])
    gamma = closed(eng, 1, batch)
    assert float(gamma.ttft_p99[0]) < float(short.ttft_p99[0]) < float(r.ttft_p99[0])
    assert float(gamma.ttft_p99[0]) < 0.85 * p99


@pytest.mark.parametrize("gate", ["off", "6/2", "9/3"])
def test_decode_slope_is_the_decode_steps_own(gate):
    """The TPOT tail's drift slope dt_d/dB is the decode iteration's change per sequence of
    occupancy, whatever the gate: the gated chunked fixed point's bisection once reused the name of
    the bumped occupancy for its bracket mask, so the slope came out negative there (its TPOT p99
    1.8-4.2 points low at 30-60 % load)."""
    T, W = GATES[gate]
    eng = Engine(max_batch_size=CAP[8], max_num_tokens=512, chunked_prefill=True, gate_timeout_iters=T,
                 gate_wait_iters=W, rank_router="random")
    b = np.array([80.0, 160.0, 320.0])
    step = 0.02
    r0, r1 = closed(eng, 8, b), closed(eng, 8, b * (1 + step))
    rows_slope = (decode_time(r1.decode_rows) - decode_time(r0.decode_rows)) / (step * b)
    assert np.all(r0.decode_slope > 0)
    np.testing.assert_allclose(r0.decode_slope, rows_slope, rtol=0.25)
