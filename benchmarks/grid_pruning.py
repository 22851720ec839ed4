"""``api.predict``'s capacity search (``search.evaluate(fit_points=True)``: the serving model only at
the grid points that fit in memory) against the full grid, on random queries.

Each query (a random bundled hardware profile and LLM scenario with its model, accelerator count,
round, and sometimes a fixed batch or tensor-parallel size) is predicted twice, pruned and on the
full grid, and compared: feasibility, reason text, configuration, every contract metric, the
runners-up of ``run --top 6`` and the Pareto frontier. Numbers may differ by the last bit where numpy
rounds a contiguous flat axis and a broadcast grid one unit apart; the script prints the largest
relative difference and every query that differs by more than ``--rtol`` or in anything else.

    python benchmarks/grid_pruning.py [--queries 250] [--seed 0] [--rtol 1e-12]

It asserts nothing; the figures go to the README and the closing notes.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infersim import api, search  # noqa: E402
from infersim.pareto import frontier_points  # noqa: E402
from infersim.runners_up import runners_up  # noqa: E402
from infersim.specs import catalog  # noqa: E402

PRUNED = search.evaluate


def full_grid(*args, **kwargs):
    """``search.evaluate`` without the pruning (the whole grid through the serving model)."""
    kwargs.pop("fit_points", None)
    kwargs.pop("fit_only", None)
    return PRUNED(*args, **kwargs)


def outcome(hardware: str, scenario: str, kwargs: dict, evaluate) -> tuple:
    api.search.evaluate = evaluate
    try:
        p = api.predict(hardware, None, scenario, **kwargs)
    except Exception as exc:  # bad combinations (a round without this hardware, …) are compared too
        return ("error", type(exc).__name__, str(exc))
    finally:
        api.search.evaluate = PRUNED
    return (p.feasible, p.reason, p.config, p.metrics, runners_up(p, 6), frontier_points(p))


def worst_gap(a, b, rtol: float) -> float | None:
    """The largest relative difference between two outcomes' numbers, None where they differ in
    anything else (structure, text, flags)."""
    if type(a) is not type(b):
        return None
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return None
        gaps = [worst_gap(a[k], b[k], rtol) for k in a]
    elif isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return None
        gaps = [worst_gap(x, y, rtol) for x, y in zip(a, b)]
    elif isinstance(a, float) and not isinstance(a, bool):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return 0.0
        return abs(a - b) / max(abs(a), abs(b)) if math.isfinite(a) and math.isfinite(b) else None
    else:
        return 0.0 if a == b else None
    return None if any(g is None for g in gaps) else max(gaps, default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rtol", type=float, default=1e-12)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    hardware = catalog.list_ids("hardware")
    scenarios = [s for s in catalog.list_ids("scenario") if not catalog.is_non_llm_scenario(s)]
    t0 = time.perf_counter()
    kinds: dict[str, int] = {}
    same = off = 0
    worst = 0.0
    for _ in range(args.queries):
        hw, sc = rng.choice(hardware), rng.choice(scenarios)
        kwargs: dict = {"accelerators": rng.choice([1, 2, 4, 8, 16, 72])}
        if (rnd := rng.choice([None, "v4.1", "v5.1", "v6.0"])) is not None:
            kwargs["round"] = rnd
        if rng.random() < 0.2:
            kwargs["batch"] = rng.choice([8, 64, 512, 4096, 100000])
        if rng.random() < 0.2:
            kwargs["tp"] = rng.choice([1, 2, 4, 8])
        a, b = outcome(hw, sc, kwargs, PRUNED), outcome(hw, sc, kwargs, full_grid)
        kind = a[1] if a[0] == "error" else "feasible" if a[0] else "infeasible"
        kinds[kind] = kinds.get(kind, 0) + 1
        gap = worst_gap(a, b, args.rtol)
        if gap is not None and gap <= args.rtol:
            same += 1
            worst = max(worst, gap)
        else:
            off += 1
            print(f"differs: {hw} {sc} {kwargs} (largest relative difference {gap})")
    print(f"{args.queries} queries ({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))}): "
          f"{same} equal within {args.rtol:g} (largest relative difference {worst:.2g}), {off} differ; "
          f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
