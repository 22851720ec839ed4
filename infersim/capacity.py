"""Capacity planning: the fewest accelerators of each candidate hardware that serve a target load
within the scenario's latency limits, with the layout, headroom and cost, and (Server /
Interactive traffic) the latencies at the target load itself (``api.at_load``).

For each candidate the search predicts the whole system at a given accelerator count (layout,
batch and optimizations searched, limits applied) and bisects on the count: the answer is the
smallest count whose predicted capacity meets the target, not a per-accelerator rate scaled
linearly (instance sizes, whole replicas and the scale-up domain make capacity a step function
of the count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from . import api
from .checks import check_dispatch
from .errors import SpecError
from .query import Query, Software, limits_dict, load_inputs

HOURS_PER_MONTH = 730.0
"""Average hours in a month (8,760 h / 12), the convention of cloud price sheets."""


@dataclass
class Candidate:
    """The plan for one hardware profile (``feasible`` False with ``reason`` when none fits)."""

    hardware: str
    feasible: bool
    reason: str
    accelerators: int = 0
    prediction: api.Prediction | None = None
    target_tokens_per_s: float = 0.0
    price_per_hour: float = 0.0
    domain_size: int = 1
    at_target: api.Prediction | None = None
    """The chosen fleet's capacity-best configuration run at the target load (``api.at_load``): the
    latencies it serves the target with, below those at its capacity (None Offline)."""

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"hardware": self.hardware, "feasible": self.feasible, "reason": self.reason,
                             "accelerators": self.accelerators}
        if not self.feasible or self.prediction is None:
            return d
        p = self.prediction
        m, c = p.metrics, p.config
        capacity = m["tokens_per_s"]
        usd_per_hour = self.price_per_hour * self.accelerators
        served = self.target_tokens_per_s
        stats = p.result.stats
        input_rate = served / stats.osl_mean * stats.isl_mean
        d.update({
            "scale_up_domains": math.ceil(self.accelerators / self.domain_size),
            "layout": {k: c[k] for k in ("tp", "pp", "ep", "dp", "replicas", "batch")},
            "optimizations": c["optimizations"], "round": c["round"], "dispatch": c.get("dispatch"),
            "capacity_tokens_per_s": capacity, "target_tokens_per_s": served,
            "headroom": capacity / served - 1.0,
            "ttft_s": m["ttft_s"], "tpot_s": m["tpot_s"], "limits": limits_dict(p.inputs.scenario),
            "price_per_accelerator_hour": self.price_per_hour,
            "usd_per_hour": usd_per_hour, "usd_per_month": usd_per_hour * HOURS_PER_MONTH,
            "usd_per_million_tokens": usd_per_hour / (served * 3600.0) * 1e6,
            "usd_per_million_blended_tokens": usd_per_hour / ((served + input_rate) * 3600.0) * 1e6,
        })
        if self.at_target is not None:
            a = self.at_target
            d["at_target"] = {"requests_per_s": a.config.get("qps"), "meets_limits": a.feasible,
                              "limit": a.reason, **{k: a.metrics.get(k) for k in AT_TARGET_KEYS}}
        return d


AT_TARGET_KEYS = ("occupancy", "ttft_p50_s", "ttft_s", "tpot_p50_s", "tpot_s", "ttft_mean_s", "tpot_mean_s")
"""The at-target figures a plan row carries (``Candidate.at_target``; ``ttft_s`` / ``tpot_s`` are p99s)."""


def _capacity(query_at: Callable[[int], Query], n: int, cache: dict[int, api.Prediction]) -> api.Prediction:
    if n not in cache:
        cache[n] = api.predict(query_at(n))
    return cache[n]


def plan_one(hardware: str, model, scenario, target_tokens_per_s: float, *, round: str | None = None,
             price_per_hour: float | None = None, max_accelerators: int = 100_000,
             enable=(), disable=(), trace=None, dispatch: str | None = None, slo=None) -> Candidate:
    """Fewest accelerators of ``hardware`` whose predicted capacity meets the target.

    Notes
    -----
    Capacity is non-decreasing in the accelerator count at the optimum (more accelerators can
    always leave some idle), so an exponential search finds a count that meets the target and a
    bisection the smallest one; each probe is a full prediction.
    """
    inputs = load_inputs(hardware, model, scenario, trace=trace, slo=slo)
    software = Software.for_round(round, enable=enable, disable=disable, dispatch=dispatch)
    price = inputs.hardware.price.usd_per_hour if price_per_hour is None else price_per_hour
    query_at = lambda n: Query(inputs, n, software, price_per_hour=price)  # noqa: E731
    cache: dict[int, api.Prediction] = {}
    domain = inputs.hardware.scale_up.domain_size

    def meets(n: int) -> bool:
        p = _capacity(query_at, n, cache)
        return p.feasible and p.metrics["tokens_per_s"] >= target_tokens_per_s * (1 - 1e-12)

    hi = 1
    while not meets(hi):
        if hi >= max_accelerators:
            last = cache[hi]
            why = last.reason or f"capacity {last.metrics.get('tokens_per_s', 0):,.0f} tokens/s below the target"
            return Candidate(inputs.hardware_id, False, f"not met with up to {max_accelerators} accelerators: {why}",
                             domain_size=domain)
        hi = min(hi * 2, max_accelerators)
    lo = hi // 2  # does not meet (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if meets(mid):
            hi = mid
        else:
            lo = mid
    at = None
    if inputs.scenario.kind != "offline":  # the fleet's own configuration at the load it is sized for
        best = cache[hi]
        at = api.at_load(best, target_tokens_per_s / best.result.stats.osl_mean)
    return Candidate(inputs.hardware_id, True, "", hi, cache[hi], target_tokens_per_s, price, domain, at)


def plan(hardware: list[str], model, scenario, *, target_tokens_per_s: float | None = None,
         target_requests_per_s: float | None = None, round: str | None = None,
         price_per_hour: float | None = None, max_accelerators: int = 100_000, enable=(), disable=(),
         progress: Callable[[str], None] | None = None, trace=None, dispatch: str | None = None,
         slo=None) -> list[Candidate]:
    """Plan every candidate hardware; cheapest first (infeasible ones last).

    Parameters
    ----------
    target_tokens_per_s : output tokens/s the fleet must serve; or
    target_requests_per_s : requests/s (converted with the scenario's mean output length).
    trace : request trace replacing the scenario's traffic (lengths, arrival dispersion, shared
        prefixes; ``specs.traffic``); without a target, its measured arrival rate (``arrival_s``
        column) is the requests/s to serve.
    price_per_hour : US$ per accelerator-hour for every candidate (default: each profile's).
    dispatch : how the front end hands requests to the instances (``presets.DISPATCH_POLICIES``;
        default: the round preset's).
    slo : latency limits replacing the scenario's (``query.apply_slo``: ttft_ms, tpot_ms, e2e_ms,
        percentile).
    """
    check_dispatch(dispatch)  # bad input fails before any candidate is planned
    if slo and hardware:
        load_inputs(hardware[0], model, scenario, trace=trace, slo=slo)
    if trace is not None and target_tokens_per_s is None and target_requests_per_s is None:
        from .specs.traffic import read_trace

        target_requests_per_s = read_trace(trace).arrival_rate_per_s
        if target_requests_per_s is None:
            raise SpecError("the trace has no arrival_s column to take the load from: give --target-tokens-per-s or "
                            "--target-requests-per-s", file=str(trace))
    if (target_tokens_per_s is None) == (target_requests_per_s is None):
        raise SpecError("give exactly one target: --target-tokens-per-s or --target-requests-per-s"
                        + (" (or a --trace with arrival_s)" if trace is None else ""))
    target = target_tokens_per_s if target_tokens_per_s is not None else target_requests_per_s
    if not (math.isfinite(target) and target > 0):
        raise SpecError(f"the target must be a finite number > 0 (got {target})")
    if not 1 <= max_accelerators <= 1_000_000:
        raise SpecError(f"--max-accelerators must be in [1, 1e6] (got {max_accelerators})")
    if not hardware:
        raise SpecError("give at least one candidate --hardware")
    out = []
    for hw in hardware:
        if progress:
            progress(hw)
        tokens = target
        if target_requests_per_s is not None:
            inputs = load_inputs(hw, model, scenario, trace=trace, slo=slo)
            from .serving import WorkloadStats

            tokens = target * WorkloadStats.from_workload(inputs.scenario.workload, inputs.model).osl_mean
        out.append(plan_one(hw, model, scenario, tokens, round=round, price_per_hour=price_per_hour,
                            max_accelerators=max_accelerators, enable=enable, disable=disable, trace=trace,
                            dispatch=dispatch, slo=slo))
    out.sort(key=lambda c: (not c.feasible, c.to_dict().get("usd_per_month", math.inf)))
    return out


def plot(candidates: list[Candidate], path, title: str) -> None:
    """Bar chart of US$/month per feasible candidate, written atomically to ``path`` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .report import save_figure

    rows = [c.to_dict() for c in candidates if c.feasible]
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(rows)), 4), dpi=120)
    names = [f"{r['hardware']}\n×{r['accelerators']}" for r in rows]
    values = [r["usd_per_month"] for r in rows]
    ax.bar(range(len(rows)), values, color="#4c72b0")
    for i, v in enumerate(values):
        ax.text(i, v, f"${v:,.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(names, fontsize=8)
    ax.set_ylabel("US$ per month")
    ax.set_ylim(0, max(values + [1.0]) * 1.15)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
