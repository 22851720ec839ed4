"""How far apart the same GPU lands in different submitters' systems: the error floor of any model
keyed on (round, hardware, model, scenario, accelerators).

The simulator sees a run through its hardware profile, round preset, model, scenario and
accelerator count; the host CPU, the OEM's board and firmware, the submitter's tuning and the
load the submitter chose are not inputs. Two runs that share every input but differ in these get
one prediction, so their spread bounds from below the error any such model can reach on them.
This script measures that spread on the bundled data; it fits and predicts nothing.

1. Throughput (``data/mlperf_llm_results.csv``, runs at the part's standard power): in every group
   of two or more systems, each run's shortfall against the group's best (the frontier row, the one
   the accuracy tables score) and its distance from the group median.
2. Latency at equal load (``data/mlperf_operating_points.csv``, runs on a bundled hardware profile,
   one run submitted under two accuracy targets counted once): runs of one group whose scheduled
   rates lie within ``--rate-tolerance`` of each other (the same load), their TPOT p50 against the
   cluster median (APE) and their TTFT p99 against the cluster median (seconds). Compare with
   ``infersim validate --at-load`` (``tpot_p50_median_ape``, ``ttft_p99_median_abs_error_s``).

    python benchmarks/system_spread.py [--rate-tolerance 0.02] [--list]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infersim.accuracy import load_rows  # noqa: E402
from infersim.accuracy.oppoints import _num  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data"


def _quantiles(values: list[float]) -> str:
    if not values:
        return "no runs"
    a = np.asarray(values, dtype=float)
    return f"median {np.median(a):.1f}, p90 {np.percentile(a, 90):.1f}, max {a.max():.1f} ({len(a)} runs)"


def throughput_spread(path: Path, show: bool = False) -> dict:
    """Per-group spread of published tokens/s (runs at the part's standard power): each non-best
    run's shortfall against its group's best and every run's distance from the group median, %."""
    groups: dict[tuple, list] = defaultdict(list)
    for row in load_rows(path):
        if not row.power_mode:  # the part at its standard power only (see data/README.md)
            groups[row.group].append(row)
    shortfall, from_median, ratios = [], [], []
    for key, rows in sorted(groups.items()):
        if len({r.columns.get("system", "") + r.columns.get("submitter", "") for r in rows}) < 2:
            continue
        tps = [r.tokens_per_s for r in rows]
        best, med = max(tps), statistics.median(tps)
        shortfall += [100 * (1 - t / best) for t in tps if t < best]
        from_median += [100 * abs(t / med - 1) for t in tps]
        ratios.append(best / min(tps))
        if show:
            print(f"  {' '.join(map(str, key)):<48} {len(rows):>3} runs, best/worst {best / min(tps):.2f}")
    return {"groups": len(ratios), "best_over_worst": ratios, "shortfall_pct": shortfall,
            "from_median_pct": from_median}


def latency_spread(path: Path, tolerance: float = 0.02, show: bool = False) -> dict:
    """Runs of one configuration at the same scheduled rate (within ``tolerance``) on two or more
    systems: TPOT p50 APE % and |TTFT p99 error| s against each cluster's median."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    with path.open(newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if row.get("scenario") not in ("Server", "Interactive") or row.get("result_validity") != "VALID":
                continue
            rate, tpot = _num(row.get("scheduled_samples_per_s")), _num(row.get("tpot_p50_ms"))
            if rate is None or tpot is None or not row.get("hardware"):
                continue  # as validate --at-load: runs on a bundled hardware profile
            key = (row["version"], row["hardware"], row["model"], row["scenario"], row["total_accelerators"])
            # one run submitted under two accuracy targets (llama2-70b-99 and -99.9) counts once
            if not any(r["submitter"] == row["submitter"] and r["system"] == row["system"]
                       and r["scheduled_samples_per_s"] == row["scheduled_samples_per_s"]
                       and r["tpot_p50_ms"] == row["tpot_p50_ms"] for r in groups[key]):
                groups[key].append(row)
    tpot_ape, ttft_abs, clusters = [], [], 0
    for key, rows in sorted(groups.items()):
        rows.sort(key=lambda r: float(r["scheduled_samples_per_s"]))
        cluster: list[dict] = []
        for r in rows + [None]:
            rate = None if r is None else float(r["scheduled_samples_per_s"])
            if cluster and (r is None or rate > float(cluster[0]["scheduled_samples_per_s"]) * (1 + tolerance)):
                if len({c["system"] + c["submitter"] for c in cluster}) >= 2:
                    clusters += 1
                    tp = [float(c["tpot_p50_ms"]) for c in cluster]
                    med = statistics.median(tp)
                    tpot_ape += [100 * abs(t / med - 1) for t in tp]
                    tt = [_num(c.get("ttft_p99_ms")) for c in cluster]
                    tt = [t for t in tt if t is not None]
                    if len(tt) >= 2:
                        mt = statistics.median(tt)
                        ttft_abs += [abs(t - mt) / 1000 for t in tt]
                    if show:
                        print(f"  {' '.join(key)} at {float(cluster[0]['scheduled_samples_per_s']):.2f}/s: "
                              f"TPOT p50 {min(tp):.1f}-{max(tp):.1f} ms over {len(cluster)} runs")
                cluster = []
            if r is not None:
                cluster.append(r)
    return {"clusters": clusters, "tpot_p50_ape_pct": tpot_ape, "ttft_p99_abs_s": ttft_abs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=DATA / "mlperf_llm_results.csv")
    ap.add_argument("--operating-points", type=Path, default=DATA / "mlperf_operating_points.csv")
    ap.add_argument("--rate-tolerance", type=float, default=0.02, help="relative width of a same-load cluster")
    ap.add_argument("--list", action="store_true", help="print every group and cluster")
    args = ap.parse_args(argv)
    t = throughput_spread(args.results, args.list)
    r = t["best_over_worst"]
    print(f"throughput groups with two or more systems: {t['groups']} (standard power; {args.results.name})")
    if r:
        print(f"  best/worst run in a group: median {np.median(r):.2f}, max {max(r):.2f}")
    print(f"  non-frontier runs, shortfall against the group's best, %: {_quantiles(t['shortfall_pct'])}")
    print(f"  every run, distance from the group median, %: {_quantiles(t['from_median_pct'])}")
    print()
    lat = latency_spread(args.operating_points, args.rate_tolerance, args.list)
    print(f"runs at the same load (scheduled rate within {100 * args.rate_tolerance:.0f} %) on two or more systems: "
          f"{lat['clusters']} clusters ({args.operating_points.name})")
    print(f"  TPOT p50 against the cluster median, APE %: {_quantiles(lat['tpot_p50_ape_pct'])}")
    tt = lat["ttft_p99_abs_s"]
    ttft = f"median {np.median(tt):.3f} s, p90 {np.percentile(tt, 90):.3f} s" if tt else "no runs"
    print(f"  TTFT p99 against the cluster median, |error|: {ttft}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
