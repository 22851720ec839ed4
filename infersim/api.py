"""The orchestrator: specs + round preset + toggles → plan variants → search → one prediction.

This is the scalar API edge: infeasibility becomes ``InfeasibleError`` only in ``predict`` when
asked (``raise_infeasible``); bad input is ``SpecError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from . import optimizations as opt
from . import scheduler, search
from .errors import InfeasibleError, Reason, SpecError
from .graph import resolve_formats
from .grid import Result, latency_limits
from .infeasible import closest_to_limits, infeasible_message, latency_figure, scenario_percentile
from .infeasible import explain as explain_code
from .plan import Plan, SearchSpace, Serving
from .query import (Inputs, LayoutRequest, Query, Software, axis_values, default_accelerators, limits_dict,
                    load_inputs)
from .serving import WorkloadStats


def base_plan(inputs: Inputs, software: Software, layout: LayoutRequest, accelerators: int | None = None) -> Plan:
    """The plan before optimizations: specs, formats, the round's maturity, the search space.

    The preset's recipe for this model and hardware (``engine`` block) supplies the layout where
    the user fixes no layout axis and the recipe's instance fits ``accelerators`` a whole number
    of times, the formats the scenario leaves 'auto', and the stack, which decides whether the
    round's maturity multipliers apply (``PresetSpec.maturity_for``)."""
    hw, sc = inputs.hardware, inputs.scenario
    preset = software.preset
    kind = getattr(sc, "kind", "offline")
    recipe = preset.recipe_for(inputs.model_id, kind, inputs.hardware_id)
    fixed = {k: axis_values(getattr(layout, k)) for k in ("tp", "pp", "ep", "dp")}
    pinned = recipe.layout
    size = pinned.get("tp", 1) * pinned.get("pp", 1)
    if pinned and all(v is None for v in fixed.values()) and (accelerators is None or accelerators % size == 0):
        fixed.update({k: (v,) for k, v in pinned.items()})
    space = SearchSpace(**fixed, batch=axis_values(layout.batch), max_batch=sc.max_batch,
                        attention_dp=any(d > 1 for d in fixed["dp"] or ()))
    kernel, moe_kernel, host = preset.maturity_for(recipe)
    engine = preset.engine_for(inputs.model_id, kind, inputs.hardware_id)
    if software.dispatch is not None:  # the user's front end, not the preset's
        engine = replace(engine, instance_dispatch=software.dispatch)
    return Plan(hardware=hw, model=inputs.model, formats=resolve_formats(sc.precision, hw, recipe), search=space,
                serving=_serving(sc.workload),
                kernel_efficiency=kernel, moe_kernel_efficiency=moe_kernel, host_overhead_scale=host,
                engine=engine)


def _serving(workload) -> Serving:
    """Serving knobs the workload sets: its shareable prefix and, where known, the working set."""
    ws = workload.prefix_working_set_tokens
    extra = {} if ws is None else {"prefix_working_set_tokens": ws}
    return Serving(prefix_share=workload.prefix_share_fraction, **extra)


def context(inputs: Inputs) -> opt.Context:
    """What the system offers the optimizations to act on."""
    sc, model = inputs.scenario, inputs.model
    return opt.Context(is_moe=model.is_moe, has_mtp_heads=model.mtp_layers > 0,
                       has_shared_prefix=sc.workload.prefix_share_fraction > 0,
                       has_latency_limit=getattr(sc, "kind", "offline") != "offline")


def selection(query: Query) -> opt.Selection:
    """The query's optimizations resolved against its system (forced, choices, skipped); the
    preset's recipe for this model and hardware turns off what its engine does not run, unless
    the user enables it."""
    sw, inputs = query.software, query.inputs
    recipe = sw.preset.recipe_for(inputs.model_id, getattr(inputs.scenario, "kind", "offline"), inputs.hardware_id)
    by_recipe = tuple(k for k in recipe.disable if k not in sw.enable and k not in sw.disable)
    sel = opt.select(context(inputs), applied=sw.preset.optimizations, offered=sw.preset.choices,
                     scenario=[e.model_dump() for e in inputs.scenario.optimizations],
                     enable=sw.enable, disable=tuple(sw.disable) + by_recipe, params=sw.params)
    offered = {e["kind"] for e in list(sw.preset.optimizations) + list(sw.preset.choices)}
    for k in by_recipe:  # say why a lever of the round is off: the recipe, not the search
        if k in offered:
            sel.skipped[k] = recipe_off_reason(sw.round, inputs, k)
    return sel


def recipe_off_reason(round_name: str, inputs: Inputs, kind: str) -> str:
    """Why optimization ``kind`` of round ``round_name`` is off for ``inputs``: the round's recipe for
    that model, scenario and hardware does not run it (engine block ``disable``)."""
    scenario = getattr(inputs.scenario, "kind", "offline")
    return (f"the {round_name} recipe for {inputs.model_id} {scenario} on {inputs.hardware_id} does not run it "
            f"(engine block 'disable'; --enable {kind} forces it)")


def evaluate(query: Query, *, fit_only: bool = False) -> list[Result]:
    """Every optimization variant of ``query`` evaluated over its [layout, batch] grid
    (``fit_only``: see ``search.evaluate``)."""
    base = base_plan(query.inputs, query.software, query.layout, query.accelerators)
    stats = WorkloadStats.from_workload(query.inputs.scenario.workload, query.inputs.model)
    return [search.evaluate(opt.apply_all(base, transforms), query.inputs.scenario, query.accelerators, stats,
                            price_per_hour=query.price, fit_only=fit_only)
            for transforms in selection(query).variants()]


@dataclass
class Prediction:
    """One operating point (the best found) and how it was reached."""

    inputs: Inputs
    accelerators: int
    feasible: bool
    reason: str
    metrics: dict[str, float]
    config: dict[str, Any]
    breakdown: dict[str, Any]
    result: Result | None = field(default=None, repr=False)
    """The evaluation the point was taken from (None when nothing was evaluated)."""
    index: tuple[int, int] | None = None
    """(layout, batch) index of the point in ``result``."""
    results: list[Result] = field(default_factory=list, repr=False)
    """Every evaluated optimization variant (the Pareto frontier's domain)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Optimizations that could not act on this system, with the reason."""

    @property
    def plan(self) -> Plan | None:
        return None if self.result is None else self.result.plan

    def to_dict(self) -> dict[str, Any]:
        m = self.metrics
        d = {"hardware": self.inputs.hardware_id, "model": self.inputs.model_id, "scenario": self.inputs.scenario_id,
             "accelerators": self.accelerators, "feasible": self.feasible, "reason": self.reason}
        for key in ("tokens_per_s", "tokens_per_s_per_accelerator", "tokens_per_s_per_user"):
            d[key] = m.get(key, 0.0)
        for key in ("ttft_s", "tpot_s", "ttft_mean_s", "tpot_mean_s", "requests_per_s", "usd_per_million_tokens",
                    "usd_per_million_input_tokens"):
            d[key] = m.get(key)
        if "qps" in self.config:  # prediction at a given load
            d.update({k: m[k] for k in AT_LOAD_KEYS if k in m})
        d["samples_per_s"] = m.get("requests_per_s")  # MLPerf's sample = one request (Qwen3-VL's metric)
        d["config"] = self.config
        d["breakdown"] = self.breakdown
        d["skipped"] = dict(self.skipped)  # optimizations of the round left off, with the reason
        d["limits"] = limits_dict(self.inputs.scenario)  # the latency limits in force (None: Offline)
        return d


def _latency_slack(res: Result, i: int, j: int, limits, finite: bool = True) -> float | None:
    """How far point (i, j) is inside the latency ``limits`` (``grid.latency_limits``): the smallest
    1 − p99/limit (negative outside); None where no latency figure says how far (no latency limits,
    or a limit other than latency breaks: memory, batch cap, token budget, a saturated queue) and,
    with ``finite``, where the figure is not finite."""
    if not limits or (not res.ok[i, j] and Reason(int(res.reason[i, j])) not in {code for code, _, _ in limits}):
        return None
    v = min(_each_slack(res, i, j, limits).values())
    return None if finite and not np.isfinite(v) else v


def _each_slack(res: Result, i: int, j: int, limits) -> dict[str, float]:
    """1 − p99/limit of point (i, j) per latency limit (its ``ServingResult`` field)."""
    return {key: 1.0 - float(latency_figure(res, key)[i, j]) / limit_s for _, key, limit_s in limits}


def _limit_slacks(res: Result, i: int, j: int, limits) -> dict[str, float]:
    """``_each_slack`` where finite."""
    return {k: v for k, v in _each_slack(res, i, j, limits).items() if np.isfinite(v)}


def _slack(res: Result, i: int, j: int, limits) -> float:
    """``_latency_slack`` as is (not finite included), else 0 at a point within its limits and −1
    at one outside them."""
    v = _latency_slack(res, i, j, limits, finite=False)
    return v if v is not None else (0.0 if res.ok[i, j] else -1.0)


REFINE_BISECTIONS = 6
"""``refine_best``'s bracket search, where its secant (or bound) try breaks a limit, ends once the
bracket is 2⁻⁶ of the gap from the axis point to that try (as narrow as six bisections leave it), or
once a held try is within ``REFINE_SLACK`` of its latency limit, or after ``REFINE_ROUNDS``."""
REFINE_ROUNDS = 3
"""Evaluations of ``refine_best``'s bracket search after its first; each prices the bracket's secant
root (or midpoint) and ``REFINE_SPREAD`` around it together."""
REFINE_GUARDS = (1.0 / 512, 1.0 / 128, 1.0 / 32, 1.0 / 8, 0.5)
"""Batches priced with ``refine_best``'s latency try, below it by these fractions of its distance
from the axis point: where the try breaks the limit after all (a graph size, the gate), the largest
guard that holds starts the bracket search, usually within ``REFINE_SLACK`` or one round of it. A
one-layout evaluation at a few batches costs about what it costs at one (fixed per-call cost)."""
REFINE_SPREAD = (1.0 / 64, 1.0 / 8, 0.5)
"""Batches each bracket round prices beside its secant root: that far towards either end of the
bracket, as fractions of the root's distance from it."""


def refine_best(res: Result, ij: tuple[int, int], query: Query, stats: WorkloadStats) -> tuple[Result, int] | None:
    """The searched batch axis has 4 points per doubling, so the largest batch that meets the limits
    lies up to 19 % beyond the best point on it. Where the next point breaks a latency limit, the
    batch is placed at the root of the secant of ``_slack`` through the two points (the p99s grow
    convexly with the batch, so the secant's root lies just inside the limit) and the best point's
    layout alone is evaluated there: one evaluation, and a batch that moves continuously with the
    inputs (calibration needs that), a mean occupancy, not necessarily whole. Where the next point
    breaks another limit the batch goes to the KV cache's or the batch cap's bound (halfway where
    that fails too, a limit with no bound to read). Returns (evaluation of that
    layout alone, batch index 0) where it does better than the axis' point (None otherwise, where
    the batch is fixed, or where the best point is the axis' last or the next one meets the
    limits)."""
    i, j = ij
    axis = res.unfit.batch if res.unfit is not None else res.batch  # fit_only: the whole axis
    lo = float(res.batch[j])
    above = axis[axis > lo]
    if query.layout.batch is not None or above.size == 0:  # a batch the user fixed is not moved
        return None
    hi = float(above[0])
    scenario = query.inputs.scenario
    limits = latency_limits(scenario)
    col = np.flatnonzero(res.batch == hi)
    if col.size and res.ok[i, col[0]]:
        return None
    s_lo = _slack(res, i, j, limits)
    s_hi = _slack(res, i, int(col[0]), limits) if col.size else -1.0
    lay = res.layout_at(i)
    latency = s_hi > -1.0 and s_lo - s_hi > 1e-12
    if latency:  # a latency limit crossed: the secant's root
        tries = [lo + (hi - lo) * s_lo / (s_lo - s_hi)]
    else:  # memory or the batch cap: their bound, else halfway (a second try where the bound fails)
        cap = res.plan.engine.max_batch_size
        offline = res.mode == "offline"  # there the token budget is linear in the batch too
        bound = min(float(np.broadcast_to(res.max_batch, res.ok.shape)[i, j]),
                    float(cap) * lay.dp if cap is not None else np.inf,
                    scheduler.offline_batch_bound(res.plan, lay, stats) if offline else np.inf) * (1.0 - 1e-9)
        bounded = MONOTONE_LIMITS | ({Reason.TOKEN_BUDGET} if offline else set())
        if bound <= lo and col.size and Reason(int(res.reason[i, col[0]])) in bounded:
            return None  # the point sits on the bound of a limit that every larger batch breaks
        tries = [bound, 0.5 * (lo + min(bound, hi))] if lo < bound < hi else [0.5 * (lo + hi)]
    plan = replace(res.plan, search=replace(res.plan.search, batch=(), tp=(lay.tp,), pp=(lay.pp,), ep=(lay.ep,),
                                            dp=(lay.dp,)))  # the best point's layout alone (fit_only cut the axis)

    def at(bs):  # the layout alone at batches bs (one evaluation), None if it is not one row
        r = search.evaluate(plan, scenario, query.accelerators, stats, np.asarray(bs, dtype=float),
                            price_per_hour=query.price)
        return None if r.ok.shape[0] != 1 else r

    def better(r, k):
        return (r, k) if r is not None and r.score[0, k] > res.score[i, j] * (1 + 1e-9) else None

    tries = [b for b in tries if lo < b < hi]
    if not tries:
        return None
    # the tries in their order of preference, with guards below the first latency try (where it
    # breaks the limit after all, the largest guard that holds narrows the bracket at no further
    # evaluation: one evaluation prices many batches of one layout for about the cost of one)
    guards = [tries[0] - (tries[0] - lo) * f for f in REFINE_GUARDS] if latency else []
    if (got := at(tries + guards)) is None:
        return None
    for k in range(len(tries)):
        if got.ok[0, k]:
            return better(got, k)
    failed = min(tries)
    s_failed = _latency_slack(got, 0, tries.index(failed), limits)
    width = (failed - lo) * 2.0 ** -REFINE_BISECTIONS
    # every try broke a limit (the slack is not convex everywhere: a graph size, the gate): the
    # largest batch that holds between the axis' point and the lowest failed try, so the placed
    # batch still moves continuously with the inputs. Each round prices a handful of batches around
    # the secant's root of the bracket (where both ends carry a latency slack, else its midpoint) and
    # keeps the largest that holds and the next that fails above it; until the bracket is 2⁻⁶ of
    # its first width or a held try is within ``REFINE_SLACK`` of its limit
    held, lo_b, hi_b, s_a, s_b = None, lo, failed, _latency_slack(res, i, j, limits), s_failed
    # each end's slack per limit (the secant roots below)
    per_a = _limit_slacks(res, i, j, limits)
    per_b = _limit_slacks(got, 0, tries.index(failed), limits)
    evaluated = [(got, k) for k in range(len(tries), len(tries) + len(guards))]
    for n in range(REFINE_ROUNDS + 1):
        moved_lo = moved_hi = False
        for r, k in sorted(evaluated, key=lambda e: float(e[0].batch[e[1]])):
            b = float(r.batch[k])
            if not lo_b < b < hi_b:
                continue
            if r.ok[0, k]:
                held, lo_b, s_a, moved_lo = (r, k), b, _latency_slack(r, 0, k, limits), True
                per_a = _limit_slacks(r, 0, k, limits)
            else:  # the lowest failure above the largest held batch closes the bracket
                hi_b, s_b, moved_hi = b, _latency_slack(r, 0, k, limits), True
                per_b = _limit_slacks(r, 0, k, limits)
                break
        if held is not None and s_a is not None and s_a < REFINE_SLACK or hi_b - lo_b <= width or n == REFINE_ROUNDS:
            break
        if n > 0 and moved_lo and not moved_hi and s_b is not None:  # Illinois: an end kept has its slack halved
            s_b *= 0.5
            per_b = {k_: 0.5 * v for k_, v in per_b.items()}
        if n > 0 and moved_hi and not moved_lo and s_a is not None:
            s_a *= 0.5
            per_a = {k_: 0.5 * v for k_, v in per_a.items()}
        w = hi_b - lo_b
        # each limit crossed inside the bracket has its own secant root; the first is where the
        # batch stops meeting them all (the smallest slack's secant mixes one limit's slack at one
        # end with another's at the other: B300 v6.0 Llama-2-70B Interactive TP1, 362.9 → 396.5,
        # p99 TPOT binding at the first, p99 TTFT far past its limit at the second, put its root at
        # 363.7 where the TTFT's own is 367.6 and the crossing 371.9)
        roots = [lo_b + w * per_a[k_] / (per_a[k_] - per_b[k_]) for k_ in per_a
                 if k_ in per_b and per_a[k_] > 0.0 > per_b[k_]]
        if roots:
            mid = min(max(min(roots), lo_b + 0.05 * w), hi_b - 0.05 * w)
        elif s_a is not None and s_b is not None and s_a > 0.0 > s_b:
            mid = lo_b + w * s_a / (s_a - s_b)
            mid = min(max(mid, lo_b + 0.05 * w), hi_b - 0.05 * w)
        else:
            mid = lo_b + 0.5 * w
        bs = sorted({mid, *(mid - (mid - lo_b) * f for f in REFINE_SPREAD),
                     *(mid + (hi_b - mid) * f for f in REFINE_SPREAD)} - {lo_b, hi_b})
        if (got := at(bs)) is None:
            return None
        evaluated = [(got, k) for k in range(len(bs))]
    return better(*held) if held is not None else None


MONOTONE_LIMITS = frozenset({Reason.KV_CAPACITY, Reason.BATCH_LIMIT})
"""Limits that every larger batch breaks once one does: ``refine_best`` does not search above a
point that sits on their bound."""
REFINE_SLACK = 1e-3
"""A held try of ``refine_best`` whose tightest latency is within this fraction of its limit ends the
search (the batch is then within about this fraction of the largest that holds)."""


REFINE_REACH = 2.0 ** 0.25
"""One step of the searched batch axis (4 points per doubling): a layout whose best point on the
axis scores within this factor of the best one may overtake it once its batch is placed
(``refine_best`` moves a batch by less than one step)."""
REFINE_CANDIDATES = 4
"""Layouts refined besides the best one, the highest-scoring within ``REFINE_REACH``."""


def refined_best(results: list[Result], query: Query, stats: WorkloadStats):
    """The best point after placing the batch (``refine_best``) of the grid's best layout (the first
    result's where several tie) and of up to ``REFINE_CANDIDATES`` runners-up within one
    batch-axis step of it: choosing the layout on the axis alone could pick one that a runner-up
    overtakes once both batches are placed (on 12 B200 a TP4 × 3 point ahead on the axis of TP8 and
    4 idle, behind it placed: the optimum fell when accelerators were added). Returns (result,
    index, refined evaluation or None), or None where no point meets the limits."""
    best = None
    for res in results:
        ij = res.best_index()
        if ij is not None and (best is None or res.score[ij] > best[0] * (1 + 1e-9)):
            best = (float(res.score[ij]), res, ij)
    if best is None:
        return None
    top, res0, ij0 = best
    cands = [(top, res0, ij0)]
    for res in results:
        if not res.any_feasible:
            continue
        cols, rows = res.best_per_layout()
        for i in np.argsort(-rows, kind="stable"):
            if rows[i] * REFINE_REACH <= top:
                break
            if not (res is res0 and (int(i), int(cols[i])) == ij0):
                cands.append((float(rows[i]), res, (int(i), int(cols[i]))))
    cands = cands[:1] + sorted(cands[1:], key=lambda c: -c[0])[:REFINE_CANDIDATES]
    pick = None
    for score, res, ij in cands:
        if pick is not None and score * REFINE_REACH <= pick[0] * (1 + 1e-9):
            break  # placed, it would still not overtake the placed best (nor would the lower ones)
        fine = refine_best(res, ij, query, stats)
        value = float(fine[0].score[0, fine[1]]) if fine is not None else score
        if pick is None or value > pick[0] * (1 + 1e-9):
            pick = (value, res, ij, fine)
    return pick[1], pick[2], pick[3]


def predict(query: Query | None = None, /, *args, raise_infeasible: bool = False, **kwargs) -> Prediction:
    """Best operating point (highest output tokens/s per accelerator meeting the limits).

    Parameters
    ----------
    query : Query, or CLI-style arguments for ``Query.build`` (hardware, model, scenario,
        accelerators, round=, isl=, osl=, trace=, tp=, ep=, dp=, pp=, batch=, enable=,
        disable=, params=, price_per_hour=, presets_dir=, inputs=, preset=, dispatch=, slo=). Unset
        layout arguments are searched; set ones are fixed; ``dispatch`` (random, round_robin,
        load_balancing) replaces the round preset's request dispatch to the instances; ``slo``
        (e.g. ``{"tpot_ms": 30}``: ttft_ms, tpot_ms, e2e_ms, percentile) replaces those latency
        limits of the scenario's.
    raise_infeasible : raise ``InfeasibleError`` instead of returning an infeasible prediction.
    qps : requests/s for the whole system (Server/Interactive): predict the capacity-best
        aggregated configuration at that load instead (``scheduler.operating_point``).
    samples : queries LoadGen issues at ``qps`` (sets the issue time of the completed rate;
        default the 600 s minimum run).

    Returns
    -------
    Prediction with the contract metrics (tokens/s, seconds, US$), config and breakdown.
    """
    qps = kwargs.pop("qps", None)
    samples = kwargs.pop("samples", None)
    if samples is not None and (qps is None or not 1 <= samples <= 1e12):
        raise SpecError(f"--samples must be in [1, 1e12] queries and needs --qps (got {samples})")
    if not isinstance(query, Query):
        query = Query.build(query, *args, **kwargs)
    if qps is not None:
        _check_qps(query.inputs.scenario, qps)
    sel = selection(query)
    base = base_plan(query.inputs, query.software, query.layout, query.accelerators)
    stats = WorkloadStats.from_workload(query.inputs.scenario.workload, query.inputs.model)
    results: list[Result] = []
    for transforms in sel.variants():
        plan = opt.apply_all(base, transforms)
        # the serving model only at the points that fit in memory (the best point, the runners-up,
        # the Pareto frontier and the closest miss are there; the rest keep the cheap checks' reasons)
        results.append(search.evaluate(plan, query.inputs.scenario, query.accelerators, stats,
                                       price_per_hour=query.price, fit_points=True))
    n = query.accelerators
    picked = refined_best(results, query, stats)
    if picked is None:
        last = results[-1] if results else None
        reasons = last.reasons() if last is not None else {}
        top = max(reasons.items(), key=lambda kv: kv[1])[0] if reasons else "NO_LAYOUT"
        msg = infeasible_message(top, reasons, n, scenario_percentile(query.inputs.scenario))
        near = closest_to_limits(results, query.inputs.scenario)
        breakdown: dict[str, Any] = {"reasons": reasons}
        if near is not None:
            msg += "; " + near["text"]
            breakdown["closest"] = {k: v for k, v in near.items() if k != "text"}
        if raise_infeasible:
            raise InfeasibleError(msg, reasons)
        return Prediction(query.inputs, n, False, msg, {}, {"round": query.software.round}, breakdown,
                          result=last, results=results, skipped=sel.skipped)
    res, (i, j), fine = picked
    if fine is not None:
        results.append(fine[0])
        res, i, j = fine[0], 0, fine[1]
    config = res.config_at(i, j)
    config["round"] = query.software.round
    if qps is not None:
        return _at_qps(query.inputs, n, res, (i, j), config, stats, qps, results, sel.skipped, samples)
    return Prediction(query.inputs, n, True, "", res.metrics_at(i, j), config, res.breakdown_at(i, j),
                      result=res, index=(i, j), results=results, skipped=sel.skipped)


AT_LOAD_KEYS = ("requests_per_s", "occupancy", "occupancy_per_rank", "iteration_s", "decode_iteration_s", "ttft_p50_s",
                "tpot_p50_s", "capacity_tokens_per_s", "completed_tokens_per_s", "completed_tokens_per_s_per_accelerator",
                "issue_s", "mean_latency_s", "limit")
"""Extra JSON keys of a prediction at a given load (``--qps``)."""


def _check_qps(scenario, qps: float) -> None:
    if scenario.kind == "offline" or not 0 < qps <= 1e9:
        raise SpecError(f"--qps must be in (0, 1e9] requests/s and needs a server or interactive scenario (got {qps})")


def at_load(pred: Prediction, qps: float, samples: float | None = None) -> Prediction:
    """A feasible capacity prediction's configuration run at ``qps`` requests/s: what ``predict(...,
    qps=)`` returns for the same query, without searching again."""
    if not pred.feasible or pred.result is None or pred.index is None:
        raise SpecError(f"no configuration to run at a load: {pred.reason}")
    _check_qps(pred.inputs.scenario, qps)
    return _at_qps(pred.inputs, pred.accelerators, pred.result, pred.index, dict(pred.config), pred.result.stats, qps,
                   pred.results, pred.skipped, samples)


def _at_qps(inputs: Inputs, n: int, res: Result, ij, config, stats, qps, results, skipped, samples=None) -> Prediction:
    """The capacity-best point's configuration run at ``qps`` (scheduler.operating_point; a
    disaggregated point's prefill and decode pools by disagg_load.operating_point)."""
    from .graph import Layout
    from .scheduler import operating_point

    metrics = res.metrics_at(*ij)
    if config.get("disaggregated"):  # the capacity's own pools at this load
        from . import disagg_load

        dec, d, pre, p = disagg_load.deployment(config)
        ok, why, at = disagg_load.operating_point(res.plan, dec, d, pre, p, stats, inputs.scenario, qps,
                                                  config["max_batch"], n, samples,
                                                  inside=config["kv_transfer_tier"] == "scale-up")
    else:
        lay = Layout(**{k: config[k] for k in ("tp", "pp", "ep", "dp")})
        ok, why, at = operating_point(res.plan, lay, config["replicas"], stats, inputs.scenario, qps,
                                      config["max_batch"], n / (config["tp"] * config["pp"]), samples)
    metrics.update(at, tokens_per_s_per_accelerator=at["tokens_per_s"] / n, capacity_tokens_per_s=metrics["tokens_per_s"],
                   completed_tokens_per_s_per_accelerator=at["completed_tokens_per_s"] / n,
                   tokens_per_s_per_user=1.0 / at["tpot_mean_s"] if at["tpot_mean_s"] > 0 else 0.0)
    metrics["limit"] = why  # the first limit the load breaks ('' where every limit holds)
    config["qps"] = qps
    pct = scenario_percentile(inputs.scenario)
    msg = "" if ok else f"at {qps:g} requests/s on {n} accelerators: {explain_code(why, pct)}"
    return Prediction(inputs, n, ok, msg, metrics, config, res.breakdown_at(*ij), result=res, index=ij,
                      results=results, skipped=skipped)


def explain(pred: Prediction) -> list[dict[str, Any]]:
    """Per-operator times of the chosen point's engine step: exactly the step the evaluation
    priced (one instance; offline steps include their share of prefill).

    Rows: op, kind, bound, time_s (summed over layers and pipeline stages), share of the step.
    """
    from .engine import step_cost

    if not pred.feasible or pred.result is None or pred.index is None:
        return []
    i, j = pred.index
    cost = step_cost(pred.result.plan, pred.result.layout_at(i), pred.result.shape_at(i, j), detail=True)
    total = float(cost.total)
    rows = [{"op": name, "kind": cost.op_info[name][0], "bound": cost.op_info[name][1], "time_s": float(t),
             "share": float(t) / total} for name, t in cost.by_op.items() if float(t) > 0]
    rows.sort(key=lambda r: -r["time_s"])
    overhead = float(cost.by_kind["overhead"])
    rows.append({"op": "launch + host overhead", "kind": "overhead", "bound": "overhead", "time_s": overhead,
                 "share": overhead / total})
    return rows


def explain_prompt(pred: Prediction) -> dict[str, Any] | None:
    """What one prompt token costs at the chosen point, by operator. Aggregated: the chosen step's
    decode batch with one mean prompt beside it (E[ISL] new tokens after prefix-cache hits, E[ISL²]
    for its attention over its own context, on one attention rank), less the decode step alone, per
    prompt token: the GEMMs it streams, its share of the tensor-parallel all-reduces, its attention
    and the eager launches of a step that carries prompt tokens. Disaggregated: one mean prompt alone
    on a prefill worker of the chosen prefill layout (``disagg_eval.prefill_options``' ``t_alone``),
    launches and host time included. What a prompt's prefill, and so its TTFT, is made of. None where
    nothing is chosen.

    Returns {"where" ("beside the decode step" or "prefill worker"), "layout", "prompt_tokens",
    "seconds_per_token", "prompt_s", "rows"}: rows as ``explain``'s (op, kind, bound, time_s per
    prompt token, share of it), the launch and host time last.
    """
    from .engine import step_cost
    from .graph import Layout, Shape
    from .serving import _prefill, prefix_hit, rank_imbalance

    res = pred.result
    if not pred.feasible or res is None or pred.index is None:
        return None
    i, j = pred.index
    st = res.stats
    disagg = "disagg" in res.pools
    if disagg:  # the prefill worker's own layout, as the pool priced it (workers: the accelerators over its size)
        lay = pred.config["prefill_layout"]
        layout = Layout(tp=lay["tp"], pp=lay["pp"], ep=lay["ep"], dp=lay["dp"])
        workers = pred.accelerators / float(lay["tp"] * lay["pp"])
    else:
        layout = res.layout_at(i)
        workers = float(pred.config.get("replicas", 1) or 1)
    plen, plen_sq = _prefill(st, prefix_hit(res.plan, workers))
    plen, plen_sq = float(np.ravel(plen)[0]), float(np.ravel(plen_sq)[0])
    if not plen > 0.0:
        return None
    prompt = dict(prefill_seqs=1.0, prefill_len=plen, prefill_len_sq=plen_sq,
                  prefill_rank_imbalance=float(rank_imbalance(1.0, layout.dp)),
                  prefill_patches=st.vision_patches, prefill_patches_sq=st.vision_patches_sq)
    if disagg:
        plus, base = step_cost(res.plan, layout, Shape(**prompt), detail=True), None
    else:
        decode = replace(res.shape_at(i, j), prefill_seqs=0.0)
        base, plus = (step_cost(res.plan, layout, s, detail=True) for s in (decode, replace(decode, **prompt)))

    def per_prompt_token(get):  # the prompt's part of a figure, per token: all of it on a prefill worker
        return (float(get(plus)) - (0.0 if base is None else float(get(base)))) / plen

    per_token = per_prompt_token(lambda c: c.total)
    rows = []
    for name in plus.by_op:
        dt = per_prompt_token(lambda c, n=name: c.by_op.get(n, 0.0))
        if dt > 1e-6 * per_token:  # ops the prompt does not touch (or by round-off only) are left out
            kind, bound = plus.op_info[name]
            rows.append({"op": name, "kind": kind, "bound": bound, "time_s": dt})
    rows.sort(key=lambda r: -r["time_s"])
    extra = per_prompt_token(lambda c: c.by_kind["overhead"])
    rows.append({"op": "launch + host overhead", "kind": "overhead", "bound": "overhead", "time_s": extra})
    for r in rows:
        r["share"] = r["time_s"] / per_token if per_token > 0 else 0.0
    return {"where": "prefill worker" if disagg else "beside the decode step",
            "layout": {"tp": int(layout.tp), "pp": int(layout.pp), "ep": int(layout.ep), "dp": int(layout.dp)},
            "prompt_tokens": plen, "seconds_per_token": per_token, "prompt_s": per_token * plen, "rows": rows}


__all__ = ["predict", "at_load", "evaluate", "explain", "explain_prompt", "load_inputs", "Prediction", "Inputs", "Query", "Reason",
           "default_accelerators", "SpecError"]
