"""Search: evaluate every candidate layout × batch at once, mask, and pick the best.

The grid is [layout, batch]: layouts are a 1-D list of (tp, pp, ep, dp) tuples (an integer
axis), batch is a geometric axis. Everything is evaluated as arrays; infeasible points carry a
``Reason``. The best point maximizes output tokens/s per accelerator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import parallel, serving
from .errors import Reason, reason_counts, require
from .plan import Plan
from .serving import ServingResult, WorkloadStats

BATCH_GRID = np.unique(np.round(np.geomspace(1, 16384, 57)))
"""Default decode-batch axis (sequences per instance), geometric 1 … 16384."""


@dataclass
class GridResult:
    """Arrays over the [layout, batch] grid for one plan and accelerator count."""

    layouts: dict[str, np.ndarray]
    batch: np.ndarray
    accelerators: int
    serving: ServingResult
    ok: np.ndarray
    reason: np.ndarray
    per_accelerator: np.ndarray
    """Output tokens/s per accelerator (0 where infeasible)."""
    max_batch: np.ndarray
    mode: str
    system_tokens_per_s: np.ndarray
    """Output tokens/s of the whole system (0 where infeasible)."""
    ok_capacity: np.ndarray | None = None
    """Feasible before latency limits (layout and memory only) — the Pareto frontier's domain."""
    prefill_accelerators: np.ndarray | None = None
    """Disaggregated: prefill accelerators per decode instance (continuous pool ratio)."""

    def extra_config(self, i: int, j: int) -> dict:
        if self.prefill_accelerators is None:
            return {}
        size = int(self.layouts["tp"][i] * self.layouts["pp"][i])
        p = float(np.broadcast_to(self.prefill_accelerators, self.ok.shape)[i, j])
        share = p / (p + size)
        return {"prefill_accelerators_per_decode_instance": p, "prefill_share_of_accelerators": share,
                "decode_accelerators": self.accelerators * (1 - share), "prefill_accelerators": self.accelerators * share}

    @property
    def any_feasible(self) -> bool:
        return bool(np.any(self.ok))

    def best_index(self) -> tuple[int, int] | None:
        if not self.any_feasible:
            return None
        score = np.where(self.ok, self.per_accelerator, -np.inf)
        i = int(np.argmax(score))
        return np.unravel_index(i, score.shape)

    def reasons(self) -> dict[str, int]:
        return reason_counts(self.ok, self.reason)


def evaluate(plan: Plan, scenario, accelerators: int, stats: WorkloadStats | None = None,
             batch_axis: np.ndarray | None = None) -> GridResult:
    """Evaluate the whole search space of ``plan`` for ``scenario`` on ``accelerators``."""
    stats = stats or WorkloadStats.from_workload(scenario.workload, plan.model)
    layouts = parallel.candidate_layouts(plan, accelerators)
    layout = parallel.layout_axis(layouts)
    batch = np.asarray(plan.search.batch if plan.search.batch else (BATCH_GRID if batch_axis is None else batch_axis),
                       dtype=float)[None, :]
    ok, reason = parallel.layout_feasibility(plan.model, layout, accelerators)
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
    ok_capacity = ok.copy()
    kind = getattr(scenario, "kind", "offline")
    workers = accelerators / (layout.tp * layout.pp)
    prefill_acc = None
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if kind != "offline" and plan.serving.disaggregated:
            from . import disagg_eval

            res, p_ok, _, prefill_acc = disagg_eval.evaluate(plan, scenario, accelerators, stats, layouts, batch)
            ok, reason = require(ok, reason, p_ok, Reason.SLO_TTFT)
            slo = scenario.slo
            if slo.tpot_ms is not None:
                ok, reason = require(ok, reason, res.tpot_p99 <= slo.tpot_ms * 1e-3, Reason.SLO_TPOT)
        elif kind == "offline":
            res = serving.offline(plan, layout, batch, stats, workers)
        else:
            slo = scenario.slo
            res = serving.server(plan, layout, batch, stats, percentile=slo.percentile, workers=workers)
            finite = np.isfinite(res.ttft_p99) & np.isfinite(res.tpot_p99) & (res.prefill_share < 1)
            ok, reason = require(ok, reason, finite, Reason.SATURATED)
            if slo.ttft_ms is not None:
                ok, reason = require(ok, reason, res.ttft_p99 <= slo.ttft_ms * 1e-3, Reason.SLO_TTFT)
            if slo.tpot_ms is not None:
                ok, reason = require(ok, reason, res.tpot_p99 <= slo.tpot_ms * 1e-3, Reason.SLO_TPOT)
            if slo.e2e_ms is not None:
                ok, reason = require(ok, reason, res.e2e_p99 <= slo.e2e_ms * 1e-3, Reason.SLO_E2E)
    per_acc = np.where(ok, res.tokens_per_s / (layout.tp * layout.pp), 0.0)
    if prefill_acc is None:
        # aggregated: whole instances only
        system = per_acc * (layout.tp * layout.pp) * np.floor(accelerators / (layout.tp * layout.pp))
    else:
        system = per_acc * accelerators
    return GridResult(layouts=layouts, batch=batch[0], accelerators=accelerators, serving=res, ok=ok, reason=reason,
                      per_accelerator=per_acc, max_batch=np.broadcast_to(bmax, ok.shape), mode=kind,
                      system_tokens_per_s=system, ok_capacity=ok_capacity, prefill_accelerators=prefill_acc)
