"""Why nothing was feasible: the reason codes in words, the one-line message of an infeasible
prediction, and the evaluated point that misses the latency limits by the least."""

from __future__ import annotations

from typing import Any

import numpy as np

from .grid import LAYOUT_AXES, Result, latency_limits

EXPLAIN = {
    "MEMORY": "the model's weights do not fit in accelerator memory with any allowed layout",
    "KV_CAPACITY": "weights fit but not the KV cache of even the smallest batch",
    "DIVISIBILITY": "no allowed layout divides the heads/experts/accelerators",
    "SLO_TTFT": "no configuration meets the p99 TTFT limit",
    "SLO_TPOT": "no configuration meets the p99 TPOT limit",
    "SLO_E2E": "no configuration meets the p99 end-to-end limit",
    "SATURATED": "the offered load saturates every configuration",
    "BATCH_LIMIT": "the batch limit (scenario max_batch or the engine's max_batch_size per rank) excludes every configuration",
    "TOKEN_BUDGET": "prompts do not fit the engine's max_num_tokens beside the busiest rank's decode tokens",
    "NO_LAYOUT": "no layout fits this accelerator count",
}


_LIMIT_NAMES = {"ttft_p99": "p99 TTFT", "tpot_p99": "p99 TPOT", "e2e_p99": "p99 end-to-end latency"}


def explain(code: str, percentile: float = 99.0) -> str:
    """``EXPLAIN[code]`` (the code itself where unknown) with its latency percentile the scenario's."""
    return _at_percentile(EXPLAIN.get(code, code), percentile)


def _at_percentile(text: str, percentile: float) -> str:
    """``text`` with "p99" (the names above are written at MLPerf's percentile) as ``percentile``."""
    return text if percentile == 99.0 else text.replace("p99 ", f"p{percentile:g} ")


def scenario_percentile(scenario) -> float:
    """The percentile a scenario's latency limits apply to (99 where it has none)."""
    slo = getattr(scenario, "slo", None)
    return 99.0 if slo is None else float(slo.percentile)


def latency_figure(res: Result, key: str) -> np.ndarray:
    """A ``ServingResult`` latency field over the whole grid of ``res``."""
    return np.broadcast_to(np.asarray(getattr(res.serving, key), dtype=float), res.ok.shape)


def closest_to_limits(results: list[Result], scenario) -> dict[str, Any] | None:
    """Where nothing meets the latency limits: the evaluated point that misses them by the least.

    Only points rejected by a latency limit (every other check passed) compete. Each is scored by
    its worst finite ratio p99 / limit over the scenario's limits (``grid.latency_limits``; a figure
    left unevaluated past the failing check, such as a disaggregated point's TTFT, is not finite),
    provided the limit that rejected it has a finite figure; the lowest score wins. Returns the
    point's layout, batch, whether it is disaggregated (then the layout and batch are the decode
    workers'), the limit it misses most (``limit``: the ``ServingResult`` field), its value and the
    limit in seconds, the overshoot in percent and a one-line ``text``; None where no point was
    rejected by a latency limit alone (memory, batch cap, token budget or a saturated queue), or in
    Offline.
    """
    limits = latency_limits(scenario)
    if not limits:
        return None
    codes = [int(code) for code, _, _ in limits]
    best = None
    for res in results:
        rejected = np.isin(res.reason, codes) & ~res.ok
        if not np.any(rejected):
            continue
        ratios = np.stack([latency_figure(res, key) / limit_s for _, key, limit_s in limits])
        finite = np.isfinite(ratios)
        scored = np.where(finite, ratios, -np.inf)
        own = np.zeros(res.ok.shape, dtype=bool)  # the rejecting limit's own figure is finite
        for k, code in enumerate(codes):
            own |= (res.reason == code) & finite[k]
        worst = np.where(rejected & own, np.max(scored, axis=0), np.inf)
        i, j = np.unravel_index(int(np.argmin(worst)), worst.shape)
        if np.isfinite(worst[i, j]) and (best is None or worst[i, j] < best[0]):
            best = (float(worst[i, j]), res, int(i), int(j), int(np.argmax(scored[:, i, j])))
    if best is None:
        return None
    ratio, res, i, j, k = best
    _, key, limit_s = limits[k]
    value = float(latency_figure(res, key)[i, j])
    lay = {name: int(res.layouts[name][i]) for name in LAYOUT_AXES}
    batch = float(res.batch[j])
    disaggregated = bool(res.plan.serving.disaggregated)
    where = " · ".join(f"{name} {v}" for name, v in lay.items())
    where, unit = (f"decode workers {where}", "decode worker") if disaggregated else (where, "instance")
    text = (f"closest: {where}, batch {batch:g} per {unit} ({', '.join(res.plan.applied) or 'no optimizations'}): "
            f"{_at_percentile(_LIMIT_NAMES.get(key, key), scenario_percentile(scenario))} {value * 1e3:,.1f} ms against "
            f"the {limit_s * 1e3:,.1f} ms limit "
            f"({100 * (ratio - 1):+.1f} %)")
    return {**lay, "batch": batch, "disaggregated": disaggregated, "optimizations": list(res.plan.applied),
            "limit": key, "value_s": value, "limit_s": limit_s, "over_pct": 100 * (ratio - 1), "text": text}


def infeasible_message(top: str, reasons: dict[str, int], n: int, percentile: float = 99.0) -> str:
    detail = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]))
    return f"nothing fits on {n} accelerators: {explain(top, percentile)} (rejected points: {detail or 'none'})"
