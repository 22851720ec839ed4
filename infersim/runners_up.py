"""The configurations the search ranked next to the one it picked (``infersim run --top N``).

A performance engineer asking "why this layout" wants the others beside it: for every evaluated
optimization variant and layout, the best point that meets the limits, ranked by tokens/s per
accelerator, each with what stops its batch from growing (the check the next batch on the axis
fails). The picked configuration's batch was placed between axis points (``api.refine_best``);
the others are read at their best axis point, so a runner-up may sit up to one axis step (2^¼)
below what placing its batch would give.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .api import Prediction
from .errors import Reason
from .grid import LAYOUT_AXES


def runners_up(pred: Prediction, n: int) -> list[dict[str, Any]]:
    """The picked configuration and the ``n`` best others (one entry per optimization variant and
    layout), best first. Each: ``rank`` (0 = the pick), the layout, instances, batch, the
    optimizations, tokens/s per accelerator and its ratio to the pick's, p99 TTFT and TPOT in
    seconds, and ``stops_at``: the reason code the next batch on the axis fails ("END_OF_AXIS" at
    the axis' last point, "PLACED" for the pick, whose batch sits on a limit)."""
    if not pred.feasible or pred.result is None or pred.index is None:
        return []
    pick = pred.result
    pick_key = (tuple(pick.plan.applied), *(int(pick.layouts[k][pred.index[0]]) for k in LAYOUT_AXES))
    best: dict[tuple, tuple] = {}
    for res in pred.results:
        if not res.any_feasible:
            continue
        cols, scores = res.best_per_layout()
        for i, (j, s) in enumerate(zip(cols, scores.tolist())):
            if not np.isfinite(s):
                continue
            key = (tuple(res.plan.applied), *(int(res.layouts[k][i]) for k in LAYOUT_AXES))
            if key == pick_key and res is not pick:
                continue  # the pick's own layout on the axis: superseded by its placed batch
            if key not in best or s > best[key][0]:
                best[key] = (s, res, i, int(j))
    ranked = sorted(best.items(), key=lambda kv: (kv[0] != pick_key, -kv[1][0]))[: n + 1]
    top = ranked[0][1][0] if ranked else 0.0
    out = []
    for rank, (key, (s, res, i, j)) in enumerate(ranked):
        config = res.config_at(i, j)
        m = res.metrics_at(i, j)
        if key == pick_key:
            stops = "PLACED"
        elif j + 1 < res.ok.shape[1]:
            stops = Reason(int(res.reason[i, j + 1])).name
        else:
            stops = "END_OF_AXIS"
        out.append({"rank": rank, **{k: config[k] for k in LAYOUT_AXES}, "replicas": config["replicas"],
                    "disaggregated": bool(config.get("disaggregated")), "batch": config["batch"],
                    "optimizations": list(res.plan.applied), "tokens_per_s_per_accelerator": m["tokens_per_s_per_accelerator"],
                    "of_pick": s / top if top > 0 else 0.0, "ttft_s": m["ttft_s"], "tpot_s": m["tpot_s"],
                    "stops_at": stops})
    return out
