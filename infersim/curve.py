"""Latency and throughput against offered load: one capacity search, then the configuration it
picks run at a list of loads (``api.at_load``), the picture a capacity planner reads a headroom
from (``infersim curve``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .errors import InfeasibleError, SpecError

STALLED = ("SATURATED", "BATCH_LIMIT", "TOKEN_BUDGET")
"""Limits past which an engine has no steady state: the load's latencies are not reported."""

MAX_POINTS = 200
"""Most loads one curve evaluates."""


@dataclass
class LoadCurve:
    """The capacity prediction and one row per load (``rows``: plain dicts, SI units)."""

    capacity: Any
    """``api.Prediction`` at capacity (its configuration is the one every load runs)."""
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = self.capacity.to_dict()
        return {"hardware": d["hardware"], "model": d["model"], "scenario": d["scenario"],
                "accelerators": d["accelerators"], "capacity_requests_per_s": d["requests_per_s"],
                "capacity_tokens_per_s": d["tokens_per_s"], "limits": d["limits"], "config": d["config"],
                "points": self.rows}


def check_loads(qps: list[float] | None, points: int) -> None:
    """Bad input before any search: ``qps`` (requests/s, at most ``MAX_POINTS``) or ``points``."""
    if qps:
        if len(qps) > MAX_POINTS:
            raise SpecError(f"--qps takes at most {MAX_POINTS} loads (got {len(qps)})")
        for x in qps:
            if not (math.isfinite(x) and 0 < x <= 1e9):
                raise SpecError(f"--qps values must be in (0, 1e9] requests/s (got {x})")
    elif not 1 <= points <= MAX_POINTS:
        raise SpecError(f"--points must be in [1, {MAX_POINTS}] (got {points})")


def curve(*args, qps: list[float] | None = None, points: int = 10, **kwargs) -> LoadCurve:
    """The capacity-best configuration of the system ``args`` / ``kwargs`` describe (``Query.build``'s
    CLI-style arguments) run at each load: ``qps`` as given, else ``points`` loads evenly spaced up to
    the capacity's rate (the last one the capacity itself). Raises ``SpecError`` for bad loads or an
    Offline scenario (no arrival rate), both before the search, and ``InfeasibleError`` where nothing
    meets the limits at any load (there is no configuration to run)."""
    from . import api
    from .query import Query

    check_loads(qps, points)
    query = Query.build(*args, **kwargs)
    if getattr(query.inputs.scenario, "slo", None) is None:
        raise SpecError(f"scenario '{query.inputs.scenario_id}' is offline: a load curve needs a server or interactive "
                        "scenario (requests arriving at a rate)")
    pred = api.predict(query)
    if not pred.feasible:
        raise InfeasibleError(pred.reason)
    cap = float(pred.metrics["requests_per_s"])
    out = LoadCurve(pred)
    for x in sorted(set(map(float, qps))) if qps else [cap * (i + 1) / points for i in range(points)]:
        m = api.at_load(pred, x).metrics
        stalled = m["limit"] in STALLED
        row = {"requests_per_s": x, "share_of_capacity": x / cap, "meets_limits": m["limit"] == "",
               "limit": m["limit"]}
        for key in ("tokens_per_s", "tokens_per_s_per_accelerator", "completed_tokens_per_s", "occupancy",
                    "occupancy_per_rank", "iteration_s", "ttft_p50_s", "ttft_s", "tpot_p50_s", "tpot_s"):
            v = m.get(key)
            row[key] = None if stalled or v is None or not math.isfinite(v) else float(v)
        out.rows.append(row)
    return out


def plot(c: LoadCurve, path, title: str) -> None:
    """TTFT and TPOT (p50 and the limits' percentile) against the offered load, the limits and the
    capacity marked; written atomically to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .report import percentile_label, save_figure

    d = c.to_dict()
    limits = d["limits"] or {}
    pct = percentile_label(limits)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    for ax, (name, p50, pq, key) in zip(axes, (("TTFT", "ttft_p50_s", "ttft_s", "ttft_ms"),
                                               ("TPOT", "tpot_p50_s", "tpot_s", "tpot_ms"))):
        for field_name, label, style in ((p50, "p50", "-o"), (pq, pct, "-s")):
            pts = [(r["requests_per_s"], r[field_name] * 1e3) for r in d["points"] if r[field_name] is not None]
            if pts:
                ax.plot(*zip(*pts), style, ms=3, label=f"{name} {label}")
        if limits.get(key) is not None:
            ax.axhline(limits[key], color="#c44e52", ls="--", lw=1, label=f"{pct} limit {limits[key]:g} ms")
        ax.axvline(d["capacity_requests_per_s"], color="#888888", ls=":", lw=1, label="capacity")
        ax.set_xlabel("offered load, requests/s (whole system)")
        ax.set_ylabel(f"{name}, ms")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
