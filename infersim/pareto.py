"""Pareto frontier: output tokens/s per accelerator vs tokens/s per user.

Over every configuration the search evaluated (layouts × batches × optimization variants) that
fits in memory, keep the points no other point beats on both axes. Latency limits are not
applied: the frontier shows what each interactivity level costs in throughput.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .api import Prediction
from .errors import Reason


def frontier_points(pred: Prediction) -> list[dict[str, Any]]:
    """Non-dominated (per-user, per-accelerator) points with their configurations and metrics.

    Reads the evaluated ``Result`` arrays directly (memory-feasible points, limits not applied);
    each point carries the contract metrics and whether it meets the scenario's limits. Tokens/s
    per accelerator is the whole system's over all its accelerators, as ``run`` reports it: the
    best point that meets the limits is ``run``'s prediction.
    """
    pts = []
    for k, res in enumerate(pred.results):
        # the system's tokens over all its accelerators, idle ones included (``run``'s metric), so a
        # layout that leaves accelerators idle is not shown at its instances' own rate
        per_acc = res.metrics["tokens_per_s_per_accelerator"]
        per_user = res.metrics["tokens_per_s_per_user"]
        with np.errstate(invalid="ignore"):
            good = res.ok_capacity & np.isfinite(per_acc) & np.isfinite(per_user) & (per_acc > 0)
        for i, j in zip(*np.nonzero(good)):
            pts.append((float(per_user[i, j]), float(per_acc[i, j]), k, int(i), int(j)))
    pts.sort(key=lambda p: (-p[0], -p[1]))
    out, best_acc = [], -np.inf
    for u, a, k, i, j in pts:  # sweep from most interactive to least
        if a > best_acc * (1 + 1e-9):
            best_acc = a
            res = pred.results[k]
            cfg = res.config_at(i, j)
            out.append({"tokens_per_s_per_user": u, "tokens_per_s_per_accelerator": a,
                        "ttft_p99_s": float(np.broadcast_to(res.serving.ttft_p99, res.ok.shape)[i, j]),
                        "tpot_p99_s": float(res.metrics["tpot_s"][i, j]),
                        "usd_per_million_tokens": float(res.metrics["usd_per_million_tokens"][i, j])
                        if res.ok[i, j] else None,
                        "meets_limits": bool(res.ok[i, j]), "reason": Reason(int(res.reason[i, j])).name,
                        **{key: cfg[key] for key in ("tp", "pp", "ep", "dp", "batch", "mtp_depth", "disaggregated")}})
    out.reverse()  # increasing interactivity
    return out


def plot(points: list[dict[str, Any]], path, title: str, operating_point: dict | None = None) -> None:
    """Draw the frontier (log-x) to ``path`` (PNG), atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .report import save_figure

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    x = [p["tokens_per_s_per_user"] for p in points]
    y = [p["tokens_per_s_per_accelerator"] for p in points]
    ax.plot(x, y, "o-", ms=3, lw=1.5, label="Pareto frontier")
    if operating_point:
        ax.plot([operating_point["tokens_per_s_per_user"]], [operating_point["tokens_per_s_per_accelerator"]], "r*",
                ms=12, label="best point meeting the scenario's limits")
    ax.set_xscale("log")
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("output tokens/s per user (1 / mean TPOT)")
    ax.set_ylabel("output tokens/s per accelerator")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
