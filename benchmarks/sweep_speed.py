"""Sweep speed: grid points per second end to end (step cost, serving, latency limits, cost) and
peak memory, at about 1e5, 1e6 and 1e7 points, on this machine's cores.

Each size runs in a fresh process (so peak RSS is that size's own), over llama3.1-8b and
llama3.1-70b on four hardware profiles, Server and Offline scenarios, every layout the search
allows and a dense batch axis. ``--keep best`` measures evaluation; ``--keep all --out`` adds
streaming every row to Parquet.

    python benchmarks/sweep_speed.py                 # 1e5, 1e6, 1e7 points, keep best
    python benchmarks/sweep_speed.py --keep all      # also writes every row (1e5, 1e6)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

AXES = dict(hardware=["h100-sxm", "h200-sxm", "b200", "mi325x"], model=["llama3.1-8b", "llama3.1-70b"],
            scenario=["chat-1k-1k", "batch-1k-1k"], accelerators=[8])


def _child(points: int, keep: str, workers: int) -> dict:
    from infersim.sweep import BatchRange, SweepSpec, run
    from infersim.sweep.cells import evaluate_cell

    probe = SweepSpec(**AXES, batch=[1.0, 2.0], keep="best")
    per_batch = sum(evaluate_cell(c)["points"] for c in probe.cells()) / 2  # points per batch value, all cells
    num = max(2, round(points / per_batch))
    spec = SweepSpec(**AXES, batch=BatchRange(start=1, stop=max(num, 2), num=num, spacing="linear"), keep=keep)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "sweep.parquet") if keep == "all" else None
        summary, _ = run(spec, out, workers=workers)
        size = os.path.getsize(out) if out else 0
    peak_self = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peak_children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {**summary.to_dict(), "peak_rss_mib_main": peak_self, "peak_rss_mib_worker": peak_children,
            "parquet_mib": size / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1e5,1e6,1e7")
    ap.add_argument("--keep", default="best", choices=("best", "pareto", "all"))
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--child", type=float, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(int(args.child), args.keep, args.workers)))
        return
    print(f"{'points':>12} {'cells':>6} {'seconds':>8} {'points/s':>12} {'peak RSS main':>14} {'worker':>8}  keep={args.keep}"
          f", {args.workers} workers")
    for size in args.sizes.split(","):
        if args.keep == "all" and float(size) > 2e6:
            continue  # every row to disk: 1e7 rows is gigabytes of Parquet
        out = subprocess.run([sys.executable, __file__, "--child", size, "--keep", args.keep, "--workers",
                              str(args.workers)], capture_output=True, text=True, check=True).stdout
        d = json.loads(out.strip().splitlines()[-1])
        print(f"{d['points']:>12,} {d['cells']:>6} {d['seconds']:>8.2f} {d['points_per_s']:>12,.0f} "
              f"{d['peak_rss_mib_main']:>11,.0f} MiB {d['peak_rss_mib_worker']:>5,.0f} MiB"
              + (f"  parquet {d['parquet_mib']:,.0f} MiB" if d["parquet_mib"] else ""))


if __name__ == "__main__":
    main()
