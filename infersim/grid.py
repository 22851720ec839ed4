"""The typed result of one evaluation: every contract metric over a named [layout, batch] grid.

``search.evaluate`` fills a ``Result`` for one plan (one hardware × model × scenario ×
accelerator count × optimization setting). Search (the best point), the Pareto frontier,
``explain``, ablation and validation are views of it: they index the same arrays, so a point
evaluated alone and the same point inside a grid give identical numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import parallel, tco
from .errors import Reason, reason_counts, require
from .graph import Layout, Shape
from .plan import Plan
from .serving import ServingResult, WorkloadStats

LAYOUT_AXES = ("tp", "pp", "ep", "dp")
"""Names of the layout axis's components, as the spec and CLI name them."""

METRICS = ("tokens_per_s", "tokens_per_s_per_accelerator", "tokens_per_s_per_user", "ttft_s", "tpot_s",
           "ttft_mean_s", "tpot_mean_s", "requests_per_s", "usd_per_million_tokens", "usd_per_million_input_tokens")
"""The JSON contract's per-point metrics (``ttft_s``/``tpot_s`` are p99s; SI units)."""


def apply_limits(ok, reason, res: ServingResult, scenario):
    """Mask points whose serving figures break the scenario's limits (one place for all modes).

    Offline has no latency limits. Server/Interactive: the queue must not saturate (finite
    p99s, prefill share below one), then p99 TTFT, p99 TPOT and p99 end-to-end against the
    scenario's limits, each with its own reason code.
    """
    if getattr(scenario, "kind", "offline") == "offline":
        return ok, reason
    finite = np.isfinite(res.ttft_p99) & np.isfinite(res.tpot_p99) & (np.asarray(res.prefill_share) < 1)
    ok, reason = require(ok, reason, finite, Reason.SATURATED)
    with np.errstate(invalid="ignore"):
        for code, key, limit_s in latency_limits(scenario):
            ok, reason = require(ok, reason, getattr(res, key) <= limit_s, code)
    return ok, reason


def latency_limits(scenario) -> list[tuple[Reason, str, float]]:
    """The scenario's latency limits as (reason code, ``ServingResult`` field, limit in seconds):
    p99 TTFT, TPOT and end-to-end where set; none in Offline."""
    if getattr(scenario, "kind", "offline") == "offline":
        return []
    slo = scenario.slo
    return [(code, key, ms * 1e-3) for code, key, ms in ((Reason.SLO_TTFT, "ttft_p99", slo.ttft_ms),
                                                         (Reason.SLO_TPOT, "tpot_p99", slo.tpot_ms),
                                                         (Reason.SLO_E2E, "e2e_p99", slo.e2e_ms)) if ms is not None]


def contract_metrics(system_tokens_per_s, res: ServingResult, accelerators: int, stats: WorkloadStats,
                     price_per_hour: float, shape) -> dict[str, np.ndarray]:
    """Every per-point metric of the JSON contract, broadcast to ``shape``.

    ``system_tokens_per_s``: output tokens/s of the whole system (0 where infeasible).
    """
    b = lambda a: np.broadcast_to(np.asarray(a, dtype=float), shape)  # noqa: E731
    total = b(system_tokens_per_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot_mean = b(res.tpot_mean)
        per_user = np.where(tpot_mean > 0, 1.0 / tpot_mean, 0.0)
        requests = total / stats.osl_mean
        usd_out = tco.usd_per_million_tokens(price_per_hour, accelerators, total)
        usd_in = tco.usd_per_million_tokens(price_per_hour, accelerators, requests * stats.isl_mean)
    return {"tokens_per_s": total, "tokens_per_s_per_accelerator": total / accelerators,
            "tokens_per_s_per_user": per_user, "ttft_s": b(res.ttft_p99), "tpot_s": b(res.tpot_p99),
            "ttft_mean_s": b(res.ttft_mean), "tpot_mean_s": tpot_mean, "requests_per_s": requests,
            "usd_per_million_tokens": b(usd_out), "usd_per_million_input_tokens": b(usd_in)}


@dataclass(frozen=True)
class Unfit:
    """The full batch axis of a ``fit_only`` evaluation: which of its values were evaluated
    (``columns``, ascending) and, per [layout, batch] point, the cheap checks' reason code."""

    batch: np.ndarray
    columns: np.ndarray
    reason: np.ndarray


@dataclass
class Result:
    """One plan evaluated over the grid [layout, batch] (all arrays of shape [n_layout, n_batch]).

    Attributes
    ----------
    layouts : dict of 1-D arrays ``tp``, ``pp``, ``ep``, ``dp`` (the layout axis, one entry per
        candidate layout).
    batch : 1-D array, decode sequences per instance (the batch axis).
    accelerators : accelerators in the system.
    plan : the plan (specs + applied optimizations) every point shares.
    stats : workload moments, tokens.
    shape : the engine-step ``Shape`` whose cost is ``serving.step`` (arrays broadcastable to
        the grid); ``explain`` prices exactly this step.
    serving : per-instance serving figures (seconds, tokens/s).
    ok, reason : feasibility mask and ``Reason`` code per point (limits applied).
    ok_capacity : feasible before latency limits (the Pareto frontier's domain).
    metrics : contract metrics per point (``METRICS``): what a point delivers where it fits in
        memory (``ok_capacity``), whether or not it meets the limits (``ok``); 0 tokens/s where
        it does not fit.
    max_batch : largest batch the memory allows per instance.
    pools : disaggregated only: ``disagg``, the worker counts and prefill layout per point
        (``disagg_eval.DisaggChoice``).
    """

    layouts: dict[str, np.ndarray]
    batch: np.ndarray
    accelerators: int
    plan: Plan
    stats: WorkloadStats
    shape: Shape
    serving: ServingResult
    ok: np.ndarray
    reason: np.ndarray
    ok_capacity: np.ndarray
    metrics: dict[str, np.ndarray]
    max_batch: np.ndarray
    mode: str
    pools: dict[str, Any] = field(default_factory=dict)
    unfit: "Unfit | None" = None
    """Set by ``search.evaluate(fit_only=True)``: the whole batch axis the grid was cut from."""

    # ---- views ------------------------------------------------------------------------------
    @property
    def any_feasible(self) -> bool:
        return bool(np.any(self.ok))

    @property
    def score(self) -> np.ndarray:
        """What the search maximizes: output tokens/s per accelerator, −inf where infeasible."""
        return np.where(self.ok, self.metrics["tokens_per_s_per_accelerator"], -np.inf)

    def best_index(self) -> tuple[int, int] | None:
        """(layout index, batch index) of the best feasible point, or None."""
        if not self.any_feasible:
            return None
        i, j = np.unravel_index(int(np.argmax(self.score)), self.ok.shape)
        return int(i), int(j)

    def best_per_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """Per layout row: the batch index of its best feasible point and that point's score
        (−inf where the row has none)."""
        score = self.score
        cols = np.argmax(score, axis=1)
        return cols, score[np.arange(score.shape[0]), cols]

    def reasons(self) -> dict[str, int]:
        return reason_counts(self.ok, self.reason)

    def layout_at(self, i: int) -> Layout:
        return Layout(**{k: int(self.layouts[k][i]) for k in LAYOUT_AXES})

    def shape_at(self, i: int, j: int) -> Shape:
        """The engine-step shape at one grid point (scalars)."""
        full = self.ok.shape
        # a field left None (prefill_patches_sq: one image of prefill_patches) stays None, not NaN
        return Shape(**{k: None if v is None else float(np.broadcast_to(np.asarray(v, dtype=float), full)[i, j])
                        for k, v in self.shape.__dict__.items()})

    def _at(self, a, i: int, j: int) -> float:
        return float(np.broadcast_to(np.asarray(a, dtype=float), self.ok.shape)[i, j])

    def metrics_at(self, i: int, j: int) -> dict[str, float]:
        return {k: float(v[i, j]) for k, v in self.metrics.items()}

    def config_at(self, i: int, j: int) -> dict[str, Any]:
        """Layout, batch, formats and optimizations of one point (the contract's ``config``)."""
        plan = self.plan
        lay = {k: int(self.layouts[k][i]) for k in LAYOUT_AXES}
        size = lay["tp"] * lay["pp"]
        # whole instances, none straddling a scale-up domain (parallel.packed_instances)
        n_inst = int(parallel.replicas(Layout(tp=lay["tp"], pp=lay["pp"]), self.accelerators,
                                       plan.hardware.scale_up.domain_size))
        config: dict[str, Any] = {**lay, "replicas": n_inst, "batch": float(self.batch[j]),
                                  "max_batch": self._at(self.max_batch, i, j), "weights": plan.formats.weights,
                                  "activations": plan.formats.activations, "kv_cache": plan.formats.kv_cache,
                                  "optimizations": list(plan.applied), "mtp_depth": plan.serving.draft_depth,
                                  "tokens_per_step": plan.serving.tokens_per_step, "cuda_graphs": plan.cuda_graphs,
                                  "disaggregated": plan.serving.disaggregated,
                                  # Offline: every request is there at once, nothing arrives to be dispatched
                                  "dispatch": None if self.mode == "offline" else plan.engine.instance_dispatch}
        if plan.formats.weight_mix is not None:  # a mixed-precision checkpoint: each format's share
            config["weight_mix"] = dict(plan.formats.weight_mix)
        if "disagg" in self.pools:  # integer prefill and decode pools, each with its own layout
            config.update(self.pools["disagg"].config(i, j, self.accelerators))
        else:  # aggregated: whole instances, the leftover accelerators idle
            config["idle_accelerators"] = self.accelerators - size * n_inst
        return config

    def breakdown_at(self, i: int, j: int) -> dict[str, Any]:
        """Step time by operator kind and what bounds it (the contract's ``breakdown``)."""
        step = self.serving.step
        kinds = {k: self._at(v, i, j) for k, v in step.by_kind.items()}
        cb, mb = self._at(step.compute_bound, i, j), self._at(step.memory_bound, i, j)
        bound = max((("compute", cb), ("memory", mb), ("communication", kinds["comm"]),
                     ("overhead", kinds["overhead"])), key=lambda kv: kv[1])[0]
        # a Python executor's streamed responses, serial with every iteration (plan.Engine.host_time)
        host = float(self.plan.engine.host_time(self.batch[j]))
        return {"step_s": self._at(step.total, i, j), "by_kind_s": kinds, "compute_bound_s": cb, "memory_bound_s": mb,
                "bound": bound, "prefill_share": self._at(self.serving.prefill_share, i, j), "host_s": host}

    def records(self, where: np.ndarray | None = None) -> list[dict[str, Any]]:
        """One flat record per grid point (optionally only where ``where``): layout, batch,
        feasibility with its reason, and every contract metric."""
        mask = np.ones(self.ok.shape, dtype=bool) if where is None else np.broadcast_to(where, self.ok.shape)
        out = []
        for i, j in zip(*np.nonzero(mask)):
            rec = {k: int(self.layouts[k][i]) for k in LAYOUT_AXES}
            rec.update(batch=float(self.batch[j]), feasible=bool(self.ok[i, j]),
                       reason=Reason(int(self.reason[i, j])).name, **self.metrics_at(int(i), int(j)))
            out.append(rec)
        return out


def grid_shape(layouts: dict[str, np.ndarray], batch: np.ndarray) -> tuple[int, int]:
    return (len(layouts["tp"]), len(batch))
