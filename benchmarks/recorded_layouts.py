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


def recorded_layout(settings: dict[str, str], moe: bool):
    """(tp, pp, ep, dp) from a run's engine-settings row, or None where it is not recorded or the
    run was disaggregated."""
    from infersim.run_settings import _num

    if settings.get("serving_mode", "").strip().startswith("disagg"):
        return None
    tp, pp, ep = (_num(settings.get(k)) for k in ("tensor_parallel_size", "pipeline_parallel_size", "moe_expert_parallel_size"))
    if tp is None or (moe and ep is None):
        return None
    dp = tp if settings.get("enable_attention_dp", "").strip().lower() == "true" else 1
    return int(tp), int(pp or 1), int(ep or 1) if moe else 1, int(dp)


def settings_for(row, known: dict) -> dict[str, str] | None:
    """The engine-settings row of a published result (its benchmark is the model ID with or
    without the -99 / -99.9 accuracy suffix; the first that matches)."""
    c = row.columns
    for suffix in ("", "-99", "-99.9"):
        key = (c.get("version", ""), c.get("submitter", ""), c.get("system", ""), row.model + suffix, row.scenario.capitalize())
        if key in known:
            return known[key]
    return None


def main() -> None:
    import numpy as np

    from infersim import api
    from infersim.accuracy import load_rows, validate
    from infersim.run_settings import load_engine_settings
    from infersim.specs import catalog

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all", action="store_true", help="print every row with a recorded layout")
    a = ap.parse_args()
    t0 = time.perf_counter()
    report = validate(load_rows(ROOT / "data" / "mlperf_llm_results.csv"))
    known = load_engine_settings()
    searched, pinned = [], []
    print(f"{'row':62s} {'published':>10s} {'searched':>20s} {'err %':>7s}   {'recorded':>16s} {'err %':>7s}")
    for res in report.results:
        row = res.row
        if not res.frontier or res.predicted is None or row.version not in ("v5.1", "v6.0"):
            continue
        s = settings_for(row, known)
        moe = catalog.load("model", row.model).moe is not None
        lay = recorded_layout(s, moe) if s else None
        if lay is None:
            continue
        tp, pp, ep, dp = lay
        p = api.predict(row.hardware, row.model, row.scenario_id, row.accelerators, round=res.preset,
                        disable=["disagg"], tp=tp, pp=pp, ep=ep, dp=dp)
        best = api.predict(row.hardware, row.model, row.scenario_id, row.accelerators, round=res.preset)
        c = best.config
        got = (c.get("tp"), c.get("pp"), c.get("ep"), c.get("dp"))
        e_search = 100.0 * (res.predicted / row.tokens_per_s - 1.0)
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
