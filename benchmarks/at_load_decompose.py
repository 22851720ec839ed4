"""Why the at-load TPOT error exceeds the TPOT error at the measured occupancy (issue 10).

    python benchmarks/at_load_decompose.py [--data FILE] [--by-hardware]

Per model / round / scenario (with ``--by-hardware`` also per hardware profile; rows ``infersim validate --at-load`` predicts, round preset engine on
the search's layout, the run's tokens per sample), medians of:
- p50/mean: the measured TPOT p50 over the measured mean TPOT (the model's p50 is its mean);
- occ: the occupancy the model needs to carry the measured qps over the run's steady decode batch
  (``oppoints.steady_point``: λ · tokens per sample · TPOT p50, what the calibration fits;
  LoadGen's ``mean_inflight_queries`` averages over the run's ramp and drain);
- t@occ: the model's mean TPOT at that steady occupancy over the measured TPOT p50;
- amp: 1 / (1 − ε), ε = d ln TPOT / d ln B at the predicted occupancy: how much a relative error
  of the step cost is amplified in the occupancy that carries a given rate (rate = B / (OSL·TPOT(B)));
- at-load: the predicted TPOT p50 at the measured qps over the measured p50 (signed %).
Then the rows binned by |t@occ − 1| with their median at-load TPOT p50 APE: how accurate the step
cost at the operating point must be for the at-load error to meet a target.
"""

from __future__ import annotations

import argparse
import collections
import math
import statistics

import numpy as np

from infersim import at_load as al
from infersim.accuracy.data import resolve_preset
from infersim.accuracy.oppoints import _num, load, steady_point
from infersim.graph import Layout
from infersim.scheduler import server
from infersim.serving import WorkloadStats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--by-hardware", action="store_true", help="group by hardware profile as well")
    args = ap.parse_args()
    systems = al._Systems()
    groups = collections.defaultdict(list)
    rows = []
    for cols in load(args.data or al.bundled_data()):
        r = al.predict_row(cols, systems, None)
        if r["reason"]:
            continue
        scen = cols["scenario"].strip().lower()
        n = _num(cols["total_accelerators"])
        pred = systems.get((resolve_preset(cols["version"].strip()), r["hardware"], r["model"], f"mlperf-{r['model']}-{scen}", int(n)))
        c = pred.config
        stats = WorkloadStats.from_workload(pred.inputs.scenario.workload, pred.inputs.model).with_output_mean(
            _num(cols.get("tokens_per_sample")))
        lay = Layout(tp=c["tp"], pp=c["pp"], ep=c["ep"], dp=c["dp"])
        b = r["predicted"]["occupancy_per_rank"] * c["dp"]
        occ, tsteady = steady_point(cols)
        tmean = _num(cols.get("tpot_mean_ms"))
        res = server(pred.plan, lay, np.array([b, 1.02 * b, (occ or b) / c["replicas"]]), stats, 99.0, n / (c["tp"] * c["pp"]))
        eps = math.log(res.tpot_mean[1] / res.tpot_mean[0]) / math.log(1.02)
        meas = r["measured"]["tpot_p50_ms"]
        key = (r["model"], r["version"], r["scenario"]) + ((r["hardware"],) if args.by_hardware else ())
        groups[key].append(dict(
            p50_mean=meas / tmean if tmean else math.nan,
            occ=b * c["replicas"] / occ if occ else math.nan,
            t_occ=1e3 * res.tpot_mean[2] / tsteady if (occ and tsteady) else math.nan,
            amp=1 / (1 - eps) if eps < 1 else math.inf,
            err=100 * (r["predicted"]["tpot_p50_ms"] / meas - 1)))
        rows.append(groups[key][-1])
    med = lambda xs: statistics.median([x for x in xs if not math.isnan(x)] or [math.nan])  # noqa: E731
    width = 48 if args.by_hardware else 36
    print(f"{'model round scenario' + (' hardware' if args.by_hardware else ''):{width}s} {'rows':>4s} {'p50/mean':>8s} {'occ':>6s} {'t@occ':>6s} {'amp':>5s} {'at-load':>8s}")
    for k in sorted(groups):
        g = groups[k]
        print(f"{' '.join(k):{width}s} {len(g):4d} {med([x['p50_mean'] for x in g]):8.2f} {med([x['occ'] for x in g]):6.2f} "
              f"{med([x['t_occ'] for x in g]):6.2f} {med([x['amp'] for x in g]):5.1f} {med([x['err'] for x in g]):+7.0f}%")
    print("\n|t@occ - 1|      rows  median |at-load TPOT p50 error|")
    for lo, hi in ((0.0, 0.03), (0.03, 0.06), (0.06, 0.10), (0.10, 0.20), (0.20, math.inf)):
        sel = [x for x in rows if lo <= abs(x["t_occ"] - 1.0) < hi]
        print(f"[{lo:.2f}, {hi:.2f})  {len(sel):6d}  {med([abs(x['err']) for x in sel]):8.1f} %")
    print(f"all rows: median |t@occ - 1| {100 * med([abs(x['t_occ'] - 1.0) for x in rows]):.1f} %, "
          f"median at-load APE {med([abs(x['err']) for x in rows]):.1f} %")


if __name__ == "__main__":
    main()
