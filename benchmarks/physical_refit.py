"""Issue 11 experiment: alternative fit forms against the shipped one, in sample and held out.

    python benchmarks/physical_refit.py [--knee] [--no-operating-points] [--cv round,model] [--json FILE]
                                        [--fit-memory [--memory-floor F]] [--host-ceiling-ms MS]

The shipped form (since 2026-11-25, ``fit.DEFAULT_PARAMETERS``; ``infersim calibrate`` itself)
holds the small-GEMM knee ``gemm_m_half`` at its documented 32 rows and fits ``gemm_overlap`` and
the experts' ``moe_memory_fraction`` beside the fractions of peak and the host cost per step.
The variants here, each fitted from the bundled profiles (whose knee is its documented default;
nothing bundled is written) with the bundled operating points beside the throughput rows unless
``--no-operating-points``:

- default (variant C/D of the README, ``fit.PHYSICAL_PARAMETERS``): ``gemm_overlap`` without the
  experts' stream efficiency, the host overhead held to its physical 0-1.5 ms
  (``params.PHYSICAL_STEP_OVERHEAD``; ``--host-ceiling-ms`` raises it, e.g. to 5);
- ``--knee`` (variants A/B, ``fit.KNEE_PARAMETERS``): the knee fitted, as shipped until 2026-11-25;
- ``--fit-memory`` (variant E): the dense weight-streaming ``memory_fraction`` fitted in place of
  ``gemm_overlap``; ``--memory-floor`` lowers its documented 0.5 floor to see where the data put it.

Cross-validation folds start from the documented defaults as in ``infersim calibrate --cv``.
Prints the in-sample fit (frontier median / p90, operating-point median / p90, values on a bound),
its wall time and, with ``--cv``, the held-out error per fold kind.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--knee", action="store_true", help="the knee set shipped until 2026-11-25 (fit.KNEE_PARAMETERS)")
    ap.add_argument("--no-operating-points", action="store_true", help="fit the throughput rows alone")
    ap.add_argument("--cv", default="", help="comma-separated fold kinds to cross-validate: round, hardware, model")
    ap.add_argument("--json", default=None, help="write the fit (and CV) as JSON here")
    ap.add_argument("--fit-memory", action="store_true",
                    help="physical variant E: fit the weight-streaming memory_fraction instead of gemm_overlap")
    ap.add_argument("--memory-floor", type=float, default=None,
                    help="lower bound of memory_fraction for --fit-memory (default: its documented 0.5)")
    ap.add_argument("--host-ceiling-ms", type=float, default=None,
                    help="upper bound of step_overhead_ms in the physical variants (default: the physical 1.5 ms)")
    a = ap.parse_args()

    from infersim import accuracy
    from infersim.accuracy import fit, params
    from infersim.accuracy.progress import LineProgress

    if not a.knee:
        host = params.PHYSICAL_STEP_OVERHEAD
        if a.host_ceiling_ms is not None:
            host = dataclasses.replace(host, upper=a.host_ceiling_ms)
        params.HARDWARE_RANGES["step_overhead_ms"] = host
    names = fit.KNEE_PARAMETERS if a.knee else fit.PHYSICAL_PARAMETERS
    if a.fit_memory and not a.knee:
        names = tuple("memory_fraction" if n == "gemm_overlap" else n for n in names)
        if a.memory_floor is not None:
            params.HARDWARE_RANGES["memory_fraction"] = dataclasses.replace(
                params.HARDWARE_RANGES["memory_fraction"], lower=a.memory_floor)
    ops = None if a.no_operating_points else True
    log = LineProgress(lambda m: print(f"  [{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True))
    rows = accuracy.load_rows(accuracy.bundled_data())
    t = time.perf_counter()
    res = accuracy.calibrate(rows, parameters=names, operating_points=ops, progress=log)
    print(res.to_table())
    f = lambda x: "-" if x is None else f"{x:.1f}"  # noqa: E731
    print(f"\nvariant: {'knee (shipped until 2026-11-25)' if a.knee else 'physical'}; parameters: {', '.join(names)}; "
          f"operating points: {ops is not None}")
    print(f"calibrate wall {time.perf_counter() - t:.1f} s; in-sample frontier median {f(res.after['median_ape'])} %, "
          f"p90 {f(res.after['p90_ape'])} %; operating points ({res.after['op_rows']}) median "
          f"{f(res.after['op_median_ape'])} %, p90 {f(res.after['op_p90_ape'])} %; values on a bound: {len(res.findings)}")
    out = res.to_dict()
    if a.cv:
        t = time.perf_counter()
        cv = accuracy.cross_validate(rows, folds=tuple(a.cv.split(",")), parameters=names, operating_points=ops,
                                     progress=log)
        print(accuracy.format_cv(cv))
        for kind, b in cv.items():
            print(f"{kind}: held-out frontier median {f(b['median_ape'])} %, p90 {f(b['p90_ape'])} % ({b['rows']} rows)")
        print(f"cross-validation wall {time.perf_counter() - t:.0f} s")
        out["cv"] = cv
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
