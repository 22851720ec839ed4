"""Where ``api.refine_best`` places the batch between two points of the searched axis, and what it
costs: at a latency limit (the secant's root, then rounds of several batches around the bracket's
root), at the Offline token budget's closed-form bound, and not at all above a point that sits on
the batch cap."""

from __future__ import annotations

import numpy as np
import pytest

from infersim import api, scheduler, search
from infersim.graph import Layout
from infersim.serving import WorkloadStats
from infersim.specs import catalog


@pytest.fixture
def refine_calls(monkeypatch):
    """Batches of each evaluation ``refine_best`` makes (the searches themselves give no batch axis)."""
    calls = []
    orig = search.evaluate

    def counted(plan, scenario, accelerators, stats=None, batch_axis=None, **kw):
        if batch_axis is not None:
            calls.append([float(b) for b in np.ravel(batch_axis)])
        return orig(plan, scenario, accelerators, stats, batch_axis, **kw)

    monkeypatch.setattr(search, "evaluate", counted)
    return calls


@pytest.mark.parametrize("hw,scenario,rnd,tp,tpot_limit_s", [
    ("h200-sxm", "mlperf-llama2-70b-server", "v5.1", 1, 0.2),
    ("mi300x", "mlperf-llama2-70b-server", "v4.1", 1, 0.2),
    ("h200-sxm", "mlperf-llama2-70b-interactive", "v5.1", 4, 0.04),
])
def test_latency_bound_batch_is_placed_at_the_limit(hw, scenario, rnd, tp, tpot_limit_s):
    # these layouts' next axis point breaks the p99 TPOT limit and the secant's first try overshoots
    # it (the slack is not convex there); the placed batch meets the limit within ``REFINE_SLACK``
    # (measured 0.0003 / 0.012 / 0.009 %), where six bisections left it 0.09 / 0.14 / 0.09 % short
    p = api.predict(hw, "llama2-70b", scenario, 8, round=rnd, tp=tp)
    slack = 1.0 - p.metrics["tpot_s"] / tpot_limit_s
    assert p.feasible and 0.0 <= slack <= api.REFINE_SLACK, slack


def test_bracket_search_prices_several_batches_per_evaluation(refine_calls):
    # B300 v6.0 Llama 2 70B Interactive, TP1: the next axis point (431) breaks a limit with no
    # latency figure, the halfway try 396.5 breaks p99 TPOT by 42 %: six bisections took six more
    # one-batch evaluations; the bracket rounds, each pricing the secant's root with batches either
    # side of it, reach the limit in two. Since the thirty-seventh session the p99 TTFT (with the
    # backlog's exponential tail) crosses its limit first, at batch 371.9 where the TPOT binds the
    # axis point: each limit's own secant root, the smallest taken (the smallest slack's secant,
    # TPOT's at one end and TTFT's at the other, needed three rounds and ended 1.3 % short)
    p = api.predict("b300", "llama2-70b", "mlperf-llama2-70b-interactive", 8, round="v6.0", tp=1)
    assert p.config["tp"] == 1 and p.feasible
    assert len(refine_calls) <= 3 and max(len(c) for c in refine_calls) > 1
    placed = [b for call in refine_calls for b in call if b == p.config["batch"]]
    assert placed, "the returned batch is one the refinement priced"
    # the binding limit's slack (Interactive: 40 ms p99 TPOT, 450 ms p99 TTFT)
    slack = min(1.0 - p.metrics["tpot_s"] / 0.04, 1.0 - p.metrics["ttft_s"] / 0.45)
    assert 0.0 <= slack <= api.REFINE_SLACK, slack


def test_offline_batch_reaches_the_token_budget_bound(refine_calls):
    # B200 v6.0 Llama 2 70B Offline on one GPU: the step's tokens reach max_num_tokens before the
    # batch cap (2,048) or the KV cache; the bound is linear in the batch, so one evaluation at it
    p = api.predict("b200", "llama2-70b", "mlperf-llama2-70b-offline", 1, round="v6.0", tp=1)
    scenario = catalog.load("scenario", "mlperf-llama2-70b-offline")
    stats = WorkloadStats.from_workload(scenario.workload, p.plan.model)
    bound = scheduler.offline_batch_bound(p.plan, Layout(tp=1, pp=1, ep=1, dp=1), stats)
    assert bound < p.plan.engine.max_batch_size
    assert p.config["batch"] == pytest.approx(bound, rel=1e-8)
    # the bound and the fallback halfway below it, priced together
    assert len(refine_calls) == 1 and refine_calls[0][0] == pytest.approx(bound, rel=1e-8)


def test_no_search_above_a_point_on_the_batch_cap(refine_calls):
    # L40S v4.1 TP4 Offline: the axis point is the engine's cap (1,024 sequences), which every
    # larger batch breaks: no evaluation between it and the next point (seven before)
    p = api.predict("l40s", "llama2-70b", "mlperf-llama2-70b-offline", 8, round="v4.1", tp=4)
    assert p.config["batch"] == p.plan.engine.max_batch_size == 1024
    assert refine_calls == []


@pytest.mark.parametrize("hw,model,rnd,tp,dp", [
    ("b200", "llama2-70b", "v6.0", 1, 1),       # chunked budget
    ("h200-sxm", "mixtral-8x7b", "v5.1", 1, 1),
    ("b200", "deepseek-r1", "v6.0", 8, 8),      # attention DP, non-chunked budget
    ("l40s", "llama2-70b", "v4.1", 4, 1),       # the batch cap binds
])
def test_offline_batch_bound_is_where_offline_limits_break(hw, model, rnd, tp, dp):
    from infersim import optimizations as opt
    from infersim.api import base_plan, selection
    from infersim.query import Query

    scenario_id = f"mlperf-{model}-offline"
    q = Query.build(hw, model, scenario_id, 8, round=rnd, tp=tp, dp=dp)
    plan = opt.apply_all(base_plan(q.inputs, q.software, q.layout), selection(q).variants()[0])
    stats = WorkloadStats.from_workload(q.inputs.scenario.workload, q.inputs.model)
    lay = Layout(tp=tp, pp=1, ep=tp if q.inputs.model.is_moe else 1, dp=dp)
    bound = scheduler.offline_batch_bound(plan, lay, stats)
    assert np.isfinite(bound) and bound > 0
    ok, _ = scheduler.offline_limits(plan, lay, np.array([bound * (1 - 1e-9), bound * (1 + 1e-6)]), stats)
    assert ok.ravel().tolist() == [True, False]
