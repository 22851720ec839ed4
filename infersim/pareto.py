"""Pareto frontier: output tokens/s per accelerator vs tokens/s per user.

Over every configuration the search evaluated (layouts × batches × optimization variants) that
fits in memory, keep the points no other point beats on both axes. Latency limits are not
applied: the frontier shows what each interactivity level costs in throughput.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .api import Prediction


def frontier_points(pred: Prediction) -> list[dict[str, Any]]:
    """Non-dominated (per-user, per-accelerator) points with their configurations."""
    pts = []
    for plan, grid in pred.grids:
        ok = grid.ok_capacity if grid.ok_capacity is not None else grid.ok
        s = grid.serving
        size = grid.layouts["tp"][:, None] * grid.layouts["pp"][:, None]
        per_acc = np.broadcast_to(s.tokens_per_s / size, ok.shape)
        per_user = np.broadcast_to(1.0 / s.tpot_mean, ok.shape)
        ttft = np.broadcast_to(s.ttft_p99, ok.shape)
        good = ok & np.isfinite(per_acc) & np.isfinite(per_user) & (per_acc > 0)
        for i, j in zip(*np.nonzero(good)):
            pts.append((float(per_user[i, j]), float(per_acc[i, j]), float(ttft[i, j]), plan, grid, int(i), int(j)))
    pts.sort(key=lambda p: (-p[0], -p[1]))
    out, best_acc = [], -np.inf
    for u, a, ttft, plan, grid, i, j in pts:  # sweep from most interactive to least
        if a > best_acc * (1 + 1e-9):
            best_acc = a
            out.append({"tokens_per_s_per_user": u, "tokens_per_s_per_accelerator": a, "ttft_p99_s": ttft,
                        "tp": int(grid.layouts["tp"][i]), "pp": int(grid.layouts["pp"][i]),
                        "ep": int(grid.layouts["ep"][i]), "dp": int(grid.layouts["dp"][i]),
                        "batch": float(grid.batch[j]), "mtp_depth": plan.serving.draft_depth,
                        "disaggregated": plan.serving.disaggregated})
    out.reverse()  # increasing interactivity
    return out


def plot(points: list[dict[str, Any]], path, title: str, operating_point: dict | None = None) -> None:
    """Draw the frontier (log-x) to ``path`` (PNG), atomically."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .report import write_atomic

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
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_atomic(path, buf.getvalue())
