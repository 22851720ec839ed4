"""Search space evaluation: every candidate layout × batch of one plan at once.

The grid is [layout, batch]: layouts are a 1-D list of (tp, pp, ep, dp) tuples (an integer
axis), batch is a geometric axis. Everything is evaluated as arrays; infeasible points carry a
``Reason``; the scenario's limits are applied once, for every serving mode. The result is a
``grid.Result``, whose best point maximizes output tokens/s per accelerator.
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace

import numpy as np

from . import grid, parallel, scheduler, serving
from .errors import Reason, require
from .graph import Layout
from .grid import Result, Unfit
from .plan import Plan
from .serving import WorkloadStats

BATCH_GRID = np.unique(np.round(np.geomspace(1, 16384, 57)))
"""Default decode-batch axis (sequences per instance), geometric 1 … 16384."""


def batch_grid(layouts: dict[str, np.ndarray]) -> np.ndarray:
    """The batch axis, extended at the same density (4 points per doubling, fixed points, so a
    larger system's axis contains a smaller one's) beyond 16,384 when instances are larger than
    8 GPUs, up to 2,048 sequences per GPU of the largest instance."""
    size = float(np.max(layouts["tp"] * layouts["pp"], initial=1.0))
    top = max(16384.0, 2048.0 * size)
    if top <= 16384.0:
        return BATCH_GRID
    steps = np.arange(1, int(np.ceil(np.log2(top / 16384.0) * 4)) + 1)
    return np.unique(np.concatenate([BATCH_GRID, np.round(16384.0 * 2.0 ** (steps / 4))]))


def _and(ok, reason, ok2, reason2):
    """Narrow a mask by another mask with its own reason codes (first failure kept)."""
    reason = np.where(ok & ~ok2, reason2, reason)
    return ok & ok2, reason


def _spread(x, idx, shape: tuple[int, ...]):
    """A serving figure computed at the grid points ``idx`` (a tuple of index arrays; None: the whole
    grid, ``x`` as it is) laid back onto the grid ``shape``: NaN elsewhere (False in a mask, 0 in a
    code); dataclasses and dicts field by field, scalars (the same at every point), None and strings
    as they are."""
    if idx is None:
        return x
    if is_dataclass(x):
        return replace(x, **{f.name: _spread(getattr(x, f.name), idx, shape) for f in fields(x) if f.init})
    if isinstance(x, dict):
        return {k: _spread(v, idx, shape) for k, v in x.items()}
    if isinstance(x, tuple):
        return tuple(_spread(v, idx, shape) for v in x)
    if x is None or isinstance(x, (str, bool)) or np.ndim(x) == 0:
        return x
    a = np.asarray(x)
    fill = False if a.dtype == bool else 0 if np.issubdtype(a.dtype, np.integer) else np.nan
    out = np.full(shape, fill, dtype=a.dtype)
    out[idx] = np.broadcast_to(a, idx[0].shape)
    return out


def evaluate(plan: Plan, scenario, accelerators: int, stats: WorkloadStats | None = None,
             batch_axis: np.ndarray | None = None, *, price_per_hour: float | None = None,
             fit_only: bool = False, fit_points: bool = False) -> Result:
    """Evaluate the whole search space of ``plan`` for ``scenario`` on ``accelerators``.

    Returns a ``Result`` over [layout, batch] with every contract metric, masks and reasons.
    ``price_per_hour`` (US$ per accelerator-hour) defaults to the hardware profile's price.
    ``fit_only``: the serving model runs only on the batch values at which some layout passes
    the cheap checks (weights and KV cache fit, batch caps); the Result's batch axis is those
    values and ``Result.unfit`` keeps the whole axis with the cheap checks' reasons. Every point
    of the returned axis is exactly what the full evaluation gives (elementwise arrays).
    ``fit_points``: the whole grid, the serving model only at the points that pass the cheap checks
    (one flat axis, laid back on the grid; aggregated serving): those are what the full evaluation
    gives (to the last bit but where numpy rounds a contiguous flat axis and a broadcast grid one
    unit apart), the others keep the cheap checks' reasons, 0 throughput and NaN latencies (what
    ``api.predict`` needs: its best point, runners-up, Pareto frontier and messages read only points
    that fit, and reasons).
    """
    stats = stats or WorkloadStats.from_workload(scenario.workload, plan.model)
    price = plan.hardware.price.usd_per_hour if price_per_hour is None else price_per_hour
    layouts = parallel.candidate_layouts(plan, accelerators)
    layout = parallel.layout_axis(layouts)
    batch = np.asarray(plan.search.batch if plan.search.batch else
                       (batch_grid(layouts) if batch_axis is None else batch_axis),
                       dtype=float)[None, :]
    ok, reason = parallel.layout_feasibility(plan.model, layout, accelerators, parallel.redundant_slots(plan))
    ok = np.broadcast_to(ok, (len(layouts["tp"]), batch.shape[1])).copy()
    reason = np.broadcast_to(reason, ok.shape).copy()
    q = 1.0 + plan.serving.draft_depth
    step_tokens = batch * q * (1 + 1.0 / stats.osl_mean * stats.isl_mean)
    bmax = parallel.max_batch(plan, layout, stats.context_mean, step_tokens)
    weights_fit = parallel.kv_budget_per_device(plan, layout, 0.0) > 0
    ok, reason = require(ok, reason, weights_fit, Reason.MEMORY)
    ok, reason = require(ok, reason, batch <= bmax, Reason.KV_CAPACITY)
    if plan.search.max_batch:
        ok, reason = require(ok, reason, batch <= plan.search.max_batch, Reason.BATCH_LIMIT)
    if plan.engine.max_batch_size is not None:  # sequences per attention rank (per instance without ADP)
        ok, reason = require(ok, reason, batch / layout.dp <= plan.engine.max_batch_size, Reason.BATCH_LIMIT)
    ok_capacity = ok.copy()
    if fit_only:
        cols = np.flatnonzero(ok.any(axis=0))
        if cols.size < ok.shape[1]:
            cols = cols if cols.size else np.array([0])  # nothing fits: one column keeps the shapes valid
            sub = replace(plan, search=replace(plan.search, batch=tuple(float(b) for b in batch[0, cols])))
            res = evaluate(sub, scenario, accelerators, stats, price_per_hour=price_per_hour)
            res.unfit = Unfit(batch=batch[0], columns=cols, reason=reason)
            return res
    kind = getattr(scenario, "kind", "offline")
    workers = parallel.replicas(layout, accelerators, plan.hardware.scale_up.domain_size)
    pools: dict = {}
    # fit_points: the serving model at the points that fit only (one flat axis), laid back on the grid
    live = np.nonzero(ok) if fit_points and not plan.serving.disaggregated and ok.any() and not ok.all() else None
    lay, bat, wrk = layout, batch, workers
    if live is not None:
        lay = Layout(**{k: np.broadcast_to(getattr(layout, k), ok.shape)[live] for k in grid.LAYOUT_AXES})
        bat, wrk = (np.broadcast_to(a, ok.shape)[live] for a in (batch, workers))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if kind != "offline" and plan.serving.disaggregated:
            from . import disagg_eval

            # integer prefill/decode pools (disagg_eval), sized only where memory and TPOT allow; the
            # prefill side fails TTFT where no split fits
            res, p_ok, disagg_system, pools["disagg"] = disagg_eval.evaluate(plan, scenario, accelerators, stats,
                                                                             layouts, batch, live=ok)
            slo = scenario.slo
            ok, reason = require(ok, reason, pools["disagg"].split_fits, Reason.DIVISIBILITY)
            if slo.tpot_ms is not None:
                ok, reason = require(ok, reason, res.tpot_p99 <= slo.tpot_ms * 1e-3, Reason.SLO_TPOT)
            ok, reason = require(ok, reason, p_ok, Reason.SLO_TTFT)
        elif kind == "offline":
            res = _spread(scheduler.offline(plan, lay, bat, stats, wrk), live, ok.shape)
            ok, reason = _and(ok, reason, *_spread(scheduler.offline_limits(plan, lay, bat, stats), live, ok.shape))
        else:  # the iteration-level engine: batch cap and token budget come back as reason codes
            res = _spread(scheduler.server(plan, lay, bat, stats, percentile=scenario.slo.percentile, workers=wrk),
                          live, ok.shape)
            ok, reason = _and(ok, reason, res.ok, res.reason)
        ok, reason = grid.apply_limits(ok, reason, res, scenario)
        # what each memory-feasible point delivers; ``ok`` says whether it also meets the limits
        per_instance = np.where(ok_capacity, np.nan_to_num(res.tokens_per_s, nan=0.0, posinf=0.0), 0.0)
        if pools:  # disaggregated: whole prefill and decode workers, leftovers idle
            system = np.where(ok_capacity, np.nan_to_num(disagg_system, nan=0.0, posinf=0.0), 0.0)
        else:  # aggregated: whole instances only, leftover accelerators idle
            system = per_instance * workers
    shape = ok.shape
    metrics = grid.contract_metrics(system, res, accelerators, stats, price, shape)
    return Result(layouts=layouts, batch=batch[0], accelerators=accelerators, plan=plan, stats=stats, shape=res.shape,
                  serving=res, ok=ok, reason=reason, ok_capacity=ok_capacity, metrics=metrics,
                  max_batch=np.broadcast_to(bmax, shape), mode=kind, pools=pools)
