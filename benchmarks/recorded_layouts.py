"""How much of a frontier row's error is the layout the search picks: each v5.1/v6.0 frontier row
whose run records its instance layout (tensor_parallel_size, pipeline_parallel_size,
moe_expert_parallel_size, enable_attention_dp in data/mlperf_engine_settings.csv, aggregated
serving) predicted twice with the shipped profiles and the round presets: as `infersim validate`
does (the search picks the layout) and with the run's own layout pinned (`run --tp --pp --ep
--dp`). The search maximises throughput, so pinning can only lower a prediction that keeps the
same engine; a row whose error turns from over- to under-predicted (or grows) at its own layout
is one where the model is slower than the engine on the layout the submitter chose.

    python benchmarks/recorded_layouts.py [--all]   # --all: every row, not only those whose layout differs

Prints one line per row and the frontier's median / p90 absolute error both ways over the rows
that have a recorded layout. The recorded values are inputs of the run (its launch settings), never
its result.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def by_result(known: dict) -> dict[tuple, dict[str, str]]:
    """Engine settings keyed as a published result names its run: (version, submitter, system,
    model ID without the -99 / -99.9 accuracy suffix, scenario in lower case)."""
    from infersim.accuracy.oppoints import model_id

    return {(v, sub, sys_, model_id(b), sc.lower()): s for (v, sub, sys_, b, sc), s in known.items()}


def main() -> None:
    import numpy as np

    from infersim import api
    from infersim.accuracy import frontier_mask, load_rows
    from infersim.accuracy.data import row_keys
    from infersim.run_settings import load_engine_settings, recorded_layout
    from infersim.specs import catalog

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="print every row with a recorded layout")
    a = ap.parse_args()
    t0 = time.perf_counter()
    rows = load_rows(ROOT / "data" / "mlperf_llm_results.csv")
    settings = by_result(load_engine_settings())
    searched, pinned = [], []
    print(f"{'row':62s} {'published':>10s} {'searched':>20s} {'err %':>7s}   {'recorded':>16s} {'err %':>7s}")
    for row, front, key in zip(rows, frontier_mask(rows), row_keys(rows)):
        if not front or isinstance(key, str) or row.version not in ("v5.1", "v6.0"):
            continue
        s = settings.get((row.version, row.columns.get("submitter", ""), row.columns.get("system", ""), row.model,
                          row.scenario))
        if s is None or s.get("serving_mode", "").strip().startswith("disagg"):
            continue
        lay = recorded_layout(s, catalog.load("model", row.model).moe is not None)
        if lay is None:
            continue
        best = api.predict(row.hardware, row.model, row.scenario_id, row.accelerators, round=key.preset)
        if not best.feasible:
            continue
        tp, pp, ep, dp = lay
        p = api.predict(row.hardware, row.model, row.scenario_id, row.accelerators, round=key.preset,
                        disable=["disagg"], tp=tp, pp=pp, ep=ep, dp=dp)
        c = best.config
        got = (c.get("tp"), c.get("pp"), c.get("ep"), c.get("dp"))
        e_search = 100.0 * (float(best.metrics["tokens_per_s"]) / row.tokens_per_s - 1.0)
        value = float(p.metrics.get("tokens_per_s", 0.0)) if p.feasible else 0.0
        e_pin = 100.0 * (value / row.tokens_per_s - 1.0) if value > 0 else float("nan")
        searched.append(abs(e_search))
        pinned.append(abs(e_pin))
        if a.all or tuple(got) != lay or c.get("disaggregated"):
            name = f"{row.version} {row.columns.get('submitter', '')[:12]} {row.hardware} x{row.accelerators} {row.model} {row.scenario}"
            lay_s = "disagg" if c.get("disaggregated") else f"tp{got[0]} pp{got[1]} ep{got[2]} dp{got[3]}"
            print(f"{name:62s} {row.tokens_per_s:10.0f} {lay_s:>20s} {e_search:+7.1f}   "
                  f"{f'tp{tp} pp{pp} ep{ep} dp{dp}':>16s} {e_pin:+7.1f}" + ("" if p.feasible else f"  ({p.reason})"))
    s, q = np.array(searched), np.array(pinned)
    ok = np.isfinite(q)
    print(f"\nfrontier rows with a recorded aggregated layout: {len(s)}; median / p90 abs. error, the search's layout "
          f"{np.median(s):.1f} / {np.percentile(s, 90):.1f} %, the run's own {np.median(q[ok]):.1f} / "
          f"{np.percentile(q[ok], 90):.1f} % ({int((~ok).sum())} infeasible at their own layout); {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
