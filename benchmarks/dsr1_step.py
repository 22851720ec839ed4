"""DeepSeek-R1 Server decode step on Blackwell DEP8 engines: the model's mean TPOT at each run's
*measured* occupancy (LoadGen's mean in-flight queries per attention rank, Little's law) against
its measured mean TPOT, with the step's parts.

    python benchmarks/dsr1_step.py [--profiles-dir DIR] [--hw-set FIELD=VALUE ...]

Rows: every DeepSeek-R1 Server run of data/mlperf_operating_points.csv on gb300-nvl72, b300 and
b200 whose engine was DEP8 (TP8/EP8 + attention DP, no MTP, aggregated: every such v5.1/v6.0 run,
shared/reference/mlperf_submission_configs.md 1a-1e). The layout is fixed to that engine; the round
preset supplies the engine settings (batch cap, graphs, gate, stream interval) and maturity.
Prints per row: occupancy per rank, measured mean TPOT, the model's mean TPOT there (iteration
incl. context stalls), its decode-only step and the step's parts (attention, grouped MoE GEMMs,
other GEMMs, communication, overhead + host) in ms, and the error; then the model's decode step
over a grid of occupancies for the v6.0 preset on gb300-nvl72.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HARDWARE = ("gb300-nvl72", "b300", "b200")


def hardware(hw_id: str, overrides):
    """The hardware profile with ``efficiency.FIELD=VALUE`` overrides applied."""
    from infersim.specs import catalog

    spec = catalog.load("hardware", hw_id)
    eff = dict(spec.efficiency.model_dump())
    for item in overrides:
        key, value = item.split("=", 1)
        eff[key.removeprefix("efficiency.")] = float(value)
    return spec.model_copy(update={"efficiency": type(spec.efficiency)(**eff)})


def plan_for(hw_id: str, rnd: str, overrides):
    """The plan of the DEP8 engine (no MTP, aggregated) under round ``rnd``'s preset."""
    from infersim import api

    p = api.predict(hardware(hw_id, overrides), "deepseek-r1", "mlperf-deepseek-r1-server", 8, round=rnd,
                    tp=8, ep=8, dp=8, disable=["mtp", "disagg"])
    return p.plan


def parts(plan, lay, stats, b_rank):
    """The decode step's parts at b_rank sequences per rank (ms)."""
    from infersim.engine import step_cost
    from infersim.graph import Shape

    shape = Shape(decode_seqs=np.array([b_rank * lay.dp]), decode_q=1.0, decode_ctx=np.array([stats.context_mean]))
    c = step_cost(plan, lay, shape, detail=True)
    op = {k: float(np.asarray(v).ravel()[0]) * 1e3 for k, v in c.by_op.items()}
    moe = sum(v for k, v in op.items() if k.startswith("experts_"))
    kind = {k: float(np.asarray(v).ravel()[0]) * 1e3 for k, v in c.by_kind.items()}
    return dict(total=float(np.asarray(c.total).ravel()[0]) * 1e3, attn=kind["attention"], moe=moe,
                gemm=kind["gemm"] - moe, comm=kind["comm"], over=kind["overhead"])


def main() -> None:
    from infersim.accuracy.oppoints import _num, bundled_data
    from infersim.graph import Layout
    from infersim.scheduler import server
    from infersim.serving import WorkloadStats
    from infersim.specs import catalog

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hw-set", action="append", default=[], help="efficiency override on every profile, e.g. gemm_m_half=32")
    ap.add_argument("--profiles-dir", default=None, help="profile folder searched first (e.g. a scratch refit)")
    a = ap.parse_args()
    if a.profiles_dir:
        catalog.add_profile_dir(a.profiles_dir)
    lay = Layout(tp=8, pp=1, ep=8, dp=8)
    plans = {}
    stats = None
    print(f"{'ver':5} {'submitter':10} {'hw':12} {'GPUs':>4} {'B/rank':>7} {'meas ms':>8} {'model ms':>8} {'err %':>6} "
          f"{'decode':>7} {'attn':>6} {'moe':>6} {'gemm':>6} {'comm':>6} {'ovh':>5}")
    errs = []
    for cols in csv.DictReader(open(bundled_data())):
        if cols["benchmark"] != "deepseek-r1" or cols["scenario"] != "Server" or cols["hardware"] not in HARDWARE:
            continue
        occ, tmean = _num(cols.get("mean_inflight_queries")), _num(cols.get("tpot_mean_ms"))
        n = int(float(cols["total_accelerators"]))
        if not (occ and tmean) or n % 8:
            continue
        rnd = cols["version"].strip()
        key = (cols["hardware"], rnd)
        if key not in plans:
            plans[key] = plan_for(*key, a.hw_set)
        plan = plans[key]
        if stats is None:
            stats = WorkloadStats.from_workload(catalog.load("scenario", "mlperf-deepseek-r1-server").workload, plan.model)
        b = occ / (n / 8)
        res = server(plan, lay, np.array([b]), stats, 99.0, n / 8)
        model = 1e3 * float(np.asarray(res.tpot_mean).ravel()[0])
        pt = parts(plan, lay, stats, b / 8)
        err = 100 * (model / tmean - 1)
        errs.append(abs(err))
        print(f"{rnd:5} {cols['submitter'][:10]:10} {cols['hardware']:12} {n:4d} {b / 8:7.0f} {tmean:8.1f} {model:8.1f} "
              f"{err:+6.1f} {1e3 * float(np.asarray(res.decode_iteration_s).ravel()[0]):7.1f} {pt['attn']:6.1f} "
              f"{pt['moe']:6.1f} {pt['gemm']:6.1f} {pt['comm']:6.1f} {pt['over']:5.1f}")
    print(f"rows {len(errs)}: median |mean TPOT error| at the measured occupancy {statistics.median(errs):.1f} %\n")
    plan = plans[("gb300-nvl72", "v6.0")]
    print(f"v6.0 preset, gb300-nvl72 DEP8, decode step at the mean context {stats.context_mean:.0f} tokens (ms)")
    print(f"{'B/rank':>7} {'step':>7} {'attn':>6} {'moe':>6} {'gemm':>6} {'comm':>6} {'ovh':>5}")
    for br in (64, 128, 200, 317, 400, 487, 582, 640):
        pt = parts(plan, lay, stats, br)
        print(f"{br:7d} {pt['total']:7.1f} {pt['attn']:6.1f} {pt['moe']:6.1f} {pt['gemm']:6.1f} {pt['comm']:6.1f} {pt['over']:5.1f}")


if __name__ == "__main__":
    main()
