"""Is the model's step as steep in the batch as the engines'? (issue 11 diagnostic)

    python benchmarks/step_slope.py [--json FILE] [--min-rows 5]

Reads an ``infersim validate --at-load --format json`` report (runs it when ``--json`` is not
given) and, per hardware and model with at least ``--min-rows`` aggregated runs predicted at their
measured load, prints the correlation between the TPOT p50 error (predicted / measured − 1) and
the log of the predicted occupancy per rank, with the median error in the lower and upper third
of occupancy. A positive correlation says the model's iteration cost grows faster with the batch
than the engine's: too fast at low occupancy, too slow at high.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np


def load(path: str | None) -> dict:
    """The report in ``path``, or ``at_load.validate`` on the bundled operating points (what
    ``infersim validate --at-load`` runs)."""
    if path:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    from infersim import at_load

    return at_load.validate(at_load.bundled_data())


def groups(report: dict) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """(hardware, model) -> [(predicted occupancy per rank, TPOT p50 error)] of aggregated runs."""
    out: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    for r in report["per_row"]:
        m, p = r.get("measured") or {}, r.get("predicted") or {}
        if r.get("disaggregated_run") or not m.get("tpot_p50_ms") or not p.get("tpot_p50_ms") or not p.get("occupancy_per_rank"):
            continue
        out[r["hardware"], r["model"]].append((p["occupancy_per_rank"], p["tpot_p50_ms"] / m["tpot_p50_ms"] - 1.0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="an infersim validate --at-load --format json report")
    ap.add_argument("--min-rows", type=int, default=5)
    args = ap.parse_args()
    g = groups(load(args.json))
    print(f"{'hardware':14s} {'model':15s} {'runs':>4s} {'corr':>6s} {'low third':>10s} {'high third':>11s}  occupancy")
    for (hw, model), pts in sorted(g.items()):
        if len(pts) < args.min_rows:
            continue
        occ = np.array([o for o, _ in pts])
        err = np.array([e for _, e in pts])
        if np.ptp(np.log(occ)) == 0:
            continue
        rho = float(np.corrcoef(np.log(occ), err)[0, 1])
        order = np.argsort(occ)
        k = max(1, len(order) // 3)
        lo, hi = np.median(err[order[:k]]), np.median(err[order[-k:]])
        print(f"{hw:14s} {model:15s} {len(pts):4d} {rho:+6.2f} {100 * lo:+9.1f}% {100 * hi:+10.1f}%  "
              f"{occ.min():.0f}-{occ.max():.0f}")
    if not any(len(v) >= args.min_rows for v in g.values()):
        print("no group with enough runs", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
