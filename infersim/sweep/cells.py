"""Evaluate one sweep cell: every optimization variant over its [layout, batch] arrays, reduced to
the rows the sweep keeps (all points, the best, or the Pareto frontier), as flat columns."""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import api
from ..grid import LAYOUT_AXES, METRICS, Result
from ..query import Query, limits_dict
from .spec import Cell

CATEGORY_COLUMNS = ("hardware", "model", "scenario", "round", "optimizations", "params", "dispatch")
"""String columns (one value per cell or per variant)."""
NUMBER_COLUMNS = ("accelerators", "isl", "osl", "ttft_limit_ms", "tpot_limit_ms", "price_per_hour", "mtp_depth",
                  "disaggregated", *LAYOUT_AXES, "batch", "feasible", "reason", *METRICS)
"""Numeric columns (reason: the ``Reason`` code, 0 where feasible)."""
COLUMNS = CATEGORY_COLUMNS + NUMBER_COLUMNS


def _limit_columns(scenario) -> dict[str, float]:
    """The TTFT and TPOT limits in force, ms (NaN: none, e.g. Offline)."""
    limits = limits_dict(scenario) or {}
    return {column: float("nan") if limits.get(key) is None else float(limits[key])
            for column, key in (("ttft_limit_ms", "ttft_ms"), ("tpot_limit_ms", "tpot_ms"))}


def query_for(cell: Cell) -> Query:
    return Query.build(cell.hardware, cell.model, cell.scenario, cell.accelerators, round=cell.round, isl=cell.isl,
                       osl=cell.osl, tp=cell.tp, pp=cell.pp, ep=cell.ep, dp=cell.dp, batch=cell.batch,
                       enable=cell.enable, disable=cell.disable, price_per_hour=cell.price_per_hour,
                       params=cell.param_overrides() or None, dispatch=cell.dispatch, slo=cell.slo())


def _pareto_mask(per_user: np.ndarray, per_acc: np.ndarray, domain: np.ndarray) -> np.ndarray:
    """Points of ``domain`` that no other point of it beats on both axes (ties kept once)."""
    idx = np.flatnonzero(domain)
    keep = np.zeros(per_user.shape, dtype=bool)
    if idx.size == 0:
        return keep
    order = idx[np.lexsort((-per_acc[idx], -per_user[idx]))]  # most interactive first
    best_so_far = np.maximum.accumulate(per_acc[order])
    previous = np.concatenate(([-np.inf], best_so_far[:-1]))
    keep[order[per_acc[order] > previous * (1 + 1e-12)]] = True
    return keep


THROUGHPUT = ("tokens_per_s", "tokens_per_s_per_accelerator", "requests_per_s")
"""Metrics that are 0 at a point that does not fit in memory (the rest are not defined there)."""


class _Full:
    """A ``fit_only`` Result spread back over its whole batch axis (for ``keep: all``): the
    evaluated columns as computed, the others infeasible with the cheap checks' reason, 0
    throughput, infinite cost per token and undefined (NaN) latencies."""

    def __init__(self, res: Result):
        u = res.unfit
        n_layout, n_batch = res.ok.shape[0], len(u.batch)
        self.layouts, self.batch, self.plan = res.layouts, u.batch, res.plan
        self.ok = np.zeros((n_layout, n_batch), dtype=bool)
        self.reason = np.array(np.broadcast_to(u.reason, self.ok.shape))
        self.ok[:, u.columns] = res.ok
        self.reason[:, u.columns] = np.broadcast_to(res.reason, res.ok.shape)
        self.metrics = {}
        for name, values in res.metrics.items():
            fill = 0.0 if name in THROUGHPUT else np.inf if name.startswith("usd_") else np.nan
            full = np.full(self.ok.shape, fill)
            full[:, u.columns] = values
            self.metrics[name] = full


def _rows(res: Result, mask: np.ndarray) -> dict[str, np.ndarray]:
    """Flat numeric columns of ``res`` where ``mask`` (a [layout, batch] boolean array)."""
    i, j = np.nonzero(mask)
    cols: dict[str, np.ndarray] = {k: res.layouts[k][i].astype(np.int64) for k in LAYOUT_AXES}
    cols["batch"] = res.batch[j]
    cols["feasible"] = res.ok[i, j]
    cols["reason"] = np.broadcast_to(res.reason, res.ok.shape)[i, j].astype(np.int16)
    for name in METRICS:
        cols[name] = res.metrics[name][i, j]
    return cols


def evaluate_cell(cell: Cell) -> dict[str, Any]:
    """Columns of one cell's kept rows: numeric arrays, plus per-row variant labels and the cell's
    constants (strings and numbers repeated when written)."""
    query = query_for(cell)
    results = api.evaluate(query, fit_only=True)  # batch values where no layout fits: cheap checks only
    stats = results[0].stats if results else None
    points = int(sum(r.ok.shape[0] * (len(r.unfit.batch) if r.unfit else r.ok.shape[1]) for r in results))
    parts = []
    if cell.keep == "best":
        # the batch placed, and the layout chosen after placing it, as ``api.predict`` does
        picked = api.refined_best(results, query, stats)
        if picked is not None:
            res, (i, j), fine = picked
            if fine is not None:
                (res, j), i = fine, 0
            mask = np.zeros(res.ok.shape, dtype=bool)
            mask[i, j] = True
            parts.append((res, mask))
    elif cell.keep == "pareto":
        per_user = [r.metrics["tokens_per_s_per_user"] for r in results]
        per_acc = [r.metrics["tokens_per_s_per_accelerator"] for r in results]
        flat_u = np.concatenate([u.ravel() for u in per_user]) if results else np.zeros(0)
        flat_a = np.concatenate([a.ravel() for a in per_acc]) if results else np.zeros(0)
        with np.errstate(invalid="ignore"):
            domain = np.concatenate([(r.ok_capacity & np.isfinite(a) & (a > 0)).ravel()
                                     for r, a in zip(results, per_acc)]) if results else np.zeros(0, bool)
        keep = _pareto_mask(flat_u, flat_a, domain)
        offset = 0
        for res in results:
            n = res.ok.size
            parts.append((res, keep[offset:offset + n].reshape(res.ok.shape)))
            offset += n
    else:
        full = [_Full(r) if r.unfit else r for r in results]
        parts = [(res, np.ones(res.ok.shape, dtype=bool)) for res in full]
    chunks = [(_rows(res, mask), res) for res, mask in parts if mask.any()]
    cols = {k: np.concatenate([c[k] for c, _ in chunks]) if chunks else np.zeros(0) for k in
            (*LAYOUT_AXES, "batch", "feasible", "reason", *METRICS)}
    counts = [len(c["batch"]) for c, _ in chunks] or [0]
    variant = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    labels = [",".join(r.plan.applied) for _, r in chunks] or [""]
    cols["mtp_depth"] = np.array([r.plan.serving.draft_depth for _, r in chunks] or [0])[variant]
    cols["disaggregated"] = np.array([r.plan.serving.disaggregated for _, r in chunks] or [False])[variant]
    constants = {"hardware": query.inputs.hardware_id, "model": query.inputs.model_id, "params": cell.params_label(),
                 "scenario": query.inputs.scenario_id, "round": query.software.round,
                 "dispatch": results[0].plan.engine.instance_dispatch if results else (cell.dispatch or ""),
                 "accelerators": query.accelerators, "price_per_hour": query.price,
                 "isl": stats.isl_mean if stats else float("nan"), "osl": stats.osl_mean if stats else float("nan"),
                 **_limit_columns(query.inputs.scenario)}
    return {"columns": cols, "constants": constants, "variant": variant, "variant_labels": labels,
            "points": points, "rows": int(len(cols["batch"]))}
