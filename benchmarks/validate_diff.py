"""Row-by-row difference of two ``infersim validate --format json`` reports (before / after a
change that must not move any number).

Run: ``python benchmarks/validate_diff.py BEFORE.json AFTER.json [--rtol 1e-9]``. Prints the rows
whose prediction or reason differs, the largest relative difference, and exits 1 if any row
differs by more than ``rtol`` (or in its reason), else 0.
"""

from __future__ import annotations

import argparse
import json
import math
import sys


def rows(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return json.load(f)["results"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rtol", type=float, default=1e-9)
    args = ap.parse_args()
    a, b = rows(args.before), rows(args.after)
    if len(a) != len(b):
        print(f"row counts differ: {len(a)} vs {len(b)}")
        return 1
    worst, bad = 0.0, 0
    for i, (x, y) in enumerate(zip(a, b)):
        px, py = x.get("predicted_tokens_per_s"), y.get("predicted_tokens_per_s")
        if (px is None) != (py is None) or x.get("reason") != y.get("reason"):
            print(f"row {i}: {px!r} ({x.get('reason')!r}) vs {py!r} ({y.get('reason')!r})")
            bad += 1
            continue
        if px is None:
            continue
        rel = abs(py - px) / max(abs(px), 1e-300)
        worst = max(worst, rel)
        if not rel <= args.rtol or not math.isfinite(rel):
            print(f"row {i} {x['model']} {x['scenario']} {x['hardware']} x{x['accelerators']} {x['preset']}: "
                  f"{px!r} vs {py!r} (rel {rel:.3g})")
            bad += 1
    n = sum(r.get("predicted_tokens_per_s") is not None for r in a)
    print(f"{len(a)} rows ({n} predicted): {bad} differ beyond rtol {args.rtol:g}; largest relative difference {worst:.3g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
