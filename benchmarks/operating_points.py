"""Issue-10 figures: the scheduler against its DES, latencies at the measured load, and the
DeepSeek-R1 Server headline on one GB300 NVL72 rack.

    python benchmarks/operating_points.py [--skip-des] [--des-requests N] [--des-seed S] [--skip-at-load]
                                          [--per-row] [--data FILE]

1. Closed form (infersim.scheduler.engine_queue) vs discrete-event engine (des.simulate_engine)
   over the grid of tests/test_scheduler.py: signed error (model − DES)/DES in %, with the random
   router (1a, every case) and the balanced router, the engines' own (1b, the 8-rank cases).
2. ``infersim validate --at-load`` medians over data/mlperf_operating_points.csv; with
   ``--per-row`` (2b) each row's predicted and measured occupancy and TPOT, and the model's TPOT
   at the measured occupancy.
3. DeepSeek-R1 Server, GB300 NVL72 × 72: capacity per round preset (v5.1, v6.0) and their ratio
   (published best vs best 8,064 / 2,907 = 2.77×), with the presets' full search and with the
   layout NVIDIA ran (TP8/EP8 + attention DP, no MTP, no disaggregation); and the v6.0 prediction
   at 110 requests/s (published 5,562 tokens/s/GPU completed).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

PUBLISHED = {"v5.1": 2907.0, "v6.0": 8064.0, "qps110": 5562.0}
"""Published figures the model is compared with (shared/reference/mlperf_submission_configs.md 1a,
DESIGN.md targets); printed beside the predictions, never used by the model."""

SAMPLES_QPS110 = 219_400
"""Queries LoadGen issued in NVIDIA's v6.0 GB300 x72 DeepSeek-R1 Server run (samples_run of
data/mlperf_operating_points.csv): an input of the run, setting its issue time (219,400 / 110 s)."""


def des_table(n_requests: int | None = None, seed: int = 3) -> None:
    import test_scheduler as T

    n = n_requests or T.N_REQUESTS
    cols = list(T.PAIRS)
    for router in ("random", "balanced"):
        cases = [c for c in T.case_ids() if router == "random" or c[0] > 1]
        print(f"1{'a' if router == 'random' else 'b'}. closed form vs DES, {router} router ({n:,} requests, seed {seed}; "
              "signed error %, tolerance: means 5, p99 TPOT 10, p99 TTFT 15)")
        print(f"{'case':32s} " + " ".join(f"{c:>12s}" for c in cols) + "   flags(cf/des)")
        n_ok = 0
        t0 = time.perf_counter()
        for c in cases:
            m, s = T.compare(*c, n_requests=n, seed=seed, router=router)
            errs = {k: 100 * (m[k] / getattr(s, v) - 1) for k, v in T.PAIRS.items()}
            ok = all(abs(errs[k]) <= 100 * T.TOL[k] for k in cols) and m["ok"] == T.des_ok(s)
            n_ok += ok
            name = f"d{c[0]} gate {c[1]} {c[2]} load {int(100 * c[3])}%"
            print(f"{name:32s} " + " ".join(f"{errs[k]:+12.1f}" for k in cols)
                  + f"   {m['ok']!s:>5}/{T.des_ok(s)!s:<5}" + ("" if ok else "  MISS"))
        print(f"cases within every tolerance: {n_ok} of {len(cases)} ({time.perf_counter() - t0:.1f} s)\n")


def at_load(data) -> None:
    from infersim import at_load as al

    import statistics

    runs = {}
    for label, own in (("round preset engines", False), ("each run's own engine settings (--run-engine)", True)):
        t0 = time.perf_counter()
        r = al.validate(data or al.bundled_data(), run_settings=own)
        runs[own] = r
        print(f"2. at the measured load (infersim validate --at-load{' --run-engine' if own else ''}): {label}")
        for k, v in r.items():
            if k != "per_row":
                print(f"   {k}: {v}")
        print(f"   ({time.perf_counter() - t0:.1f} s; targets: TPOT p50 median APE <= 10 %, |TTFT p99| median <= 0.3 s)\n")
    both = [(a, b) for a, b in zip(runs[False]["per_row"], runs[True]["per_row"]) if not a["reason"] and not b["reason"]]
    if both:
        print(f"   rows predicted both ways: {len(both)}")
        for label, i in (("preset", 0), ("own engine", 1)):
            print(f"   {label:10s}: TPOT p50 median APE {statistics.median(p[i]['tpot_p50_ape'] for p in both):.1f} %, "
                  f"|TTFT p99| median {statistics.median(abs(p[i]['ttft_p99_error_s']) for p in both):.2f} s")
        print()


def per_row(data) -> None:
    """Per row: TPOT p50 at the measured load against the measured one, occupancy per instance
    predicted and measured (loadgen's mean in-flight queries, Little's law), and the model's mean
    TPOT at the *measured* occupancy (the step cost and stalls without the load → occupancy
    inversion)."""
    import csv
    import statistics

    import numpy as np

    from infersim import at_load as al
    from infersim.graph import Layout
    from infersim.scheduler import server
    from infersim.serving import WorkloadStats

    systems = al._Systems()
    print("2b. per row (occupancy per instance; TPOT in ms; @Bm = model at the measured occupancy)")
    print(f"{'ver':5} {'submitter':11} {'system':30} {'bench':13} {'scen':5} {'config':16} {'B pred':>7} {'B meas':>7} "
          f"{'p50 pred':>8} {'p50 meas':>8} {'err':>6} {'mean@Bm':>8} {'mean meas':>9} {'err':>6}")
    e_load, e_occ = [], []
    for cols in csv.DictReader(open(data or al.bundled_data())):
        r = al.predict_row(cols, systems)
        occ, tmean = al._num(cols.get("mean_inflight_queries")), al._num(cols.get("tpot_mean_ms"))
        if r["reason"] or not (occ and tmean):
            continue
        c = r["config"]
        pred = systems.cache[next(k for k in systems.cache if k[1] == r["hardware"] and k[2] == r["model"]
                                  and k[3].endswith(cols["scenario"].strip().lower()) and k[4] == int(float(cols["total_accelerators"]))
                                  and k[0] == al_preset(cols))]
        stats = WorkloadStats.from_workload(pred.inputs.scenario.workload, pred.inputs.model)
        lay = Layout(tp=c["tp"], pp=c["pp"], ep=c["ep"], dp=c["dp"])
        b = occ / c["replicas"]
        at_b = 1e3 * float(server(pred.plan, lay, np.array([b]), stats, 99.0,
                                  float(cols["total_accelerators"]) / (c["tp"] * c["pp"])).tpot_mean[0])
        p, m = r["predicted"], r["measured"]
        e1, e2 = 100 * (p["tpot_p50_ms"] / m["tpot_p50_ms"] - 1), 100 * (at_b / tmean - 1)
        e_load.append(abs(e1))
        e_occ.append(abs(e2))
        cfg = f"tp{c['tp']}ep{c['ep']}dp{c['dp']}x{c['replicas']}m{c['mtp_depth']}"
        print(f"{cols['version']:5} {cols['submitter'][:11]:11} {cols['system'][:30]:30} {cols['benchmark'][:13]:13} "
              f"{cols['scenario'][:5]:5} {cfg:16} {p['occupancy_per_rank'] * c['dp']:7.0f} {b:7.0f} {p['tpot_p50_ms']:8.1f} "
              f"{m['tpot_p50_ms']:8.1f} {e1:+6.0f} {at_b:8.1f} {tmean:9.1f} {e2:+6.0f}")
    print(f"   rows {len(e_load)}: median |TPOT p50 error| at the measured load {statistics.median(e_load):.1f} %; "
          f"median |mean TPOT error| at the measured occupancy {statistics.median(e_occ):.1f} %\n")


def al_preset(cols):
    from infersim.accuracy.data import resolve_preset

    return resolve_preset(cols["version"].strip())


def headline() -> None:
    from infersim import api

    args = ("gb300-nvl72", "deepseek-r1", "mlperf-deepseek-r1-server", 72)
    print("3. DeepSeek-R1 Server, GB300 NVL72 x 72 (tokens/s/GPU)")
    for label, kw in (("round preset, full search", {}),
                      ("NVIDIA layout: TP8/EP8/ADP, no MTP, aggregated", dict(tp=8, ep=8, dp=8, disable=["mtp", "disagg"]))):
        cap = {}
        for rnd in ("v5.1", "v6.0"):
            p = api.predict(*args, round=rnd, **kw)
            cap[rnd] = p.metrics.get("tokens_per_s_per_accelerator", 0.0)
            c = p.config
            print(f"   {label:48s} {rnd}: capacity {cap[rnd]:8.0f} (published {PUBLISHED[rnd]:,.0f})  "
                  f"tp{c.get('tp')} ep{c.get('ep')} dp{c.get('dp')} batch {c.get('batch')} mtp {c.get('mtp_depth')} "
                  f"disagg {c.get('disaggregated')}")
        ratio = cap["v6.0"] / cap["v5.1"] if cap["v5.1"] else float("nan")
        print(f"   {label:48s} ratio v6.0/v5.1 = {ratio:.2f} (target 2.77 +/- 15 %: 2.35-3.19)")
        p = api.predict(*args, round="v6.0", qps=110.0, samples=SAMPLES_QPS110, **kw)
        m = p.metrics
        print(f"   {label:48s} v6.0 --qps 110 --samples {SAMPLES_QPS110}: {m['completed_tokens_per_s_per_accelerator']:.0f} "
              f"tokens/s/GPU completed (published {PUBLISHED['qps110']:,.0f}; steady state qps x OSL "
              f"{m['tokens_per_s_per_accelerator']:.0f}, mean latency {m['mean_latency_s']:.0f} s over {m['issue_s']:.0f} s "
              f"issue), feasible {p.feasible} {p.reason}; occupancy/rank "
              f"{m['occupancy_per_rank']:.0f}, iteration {1e3 * m['iteration_s']:.1f} ms, TTFT p50/p99 "
              f"{m['ttft_p50_s']:.2f}/{m['ttft_s']:.2f} s, TPOT p50/p99 {1e3 * m['tpot_p50_s']:.1f}/{1e3 * m['tpot_s']:.1f} ms")
    print("   (published v6.0 NVIDIA run: 317 sequences/rank at 56.2 ms per iteration, p99 TTFT 1.00 s, p99 TPOT 76.1 ms)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--skip-des", action="store_true")
    ap.add_argument("--des-requests", type=int, default=None,
                    help="requests per DES run (default: the test's 12,000; 192,000 is a less noisy oracle, ~45 s)")
    ap.add_argument("--des-seed", type=int, default=3, help="DES seed (default: the test's 3)")
    ap.add_argument("--skip-at-load", action="store_true")
    ap.add_argument("--data", default=None)
    ap.add_argument("--per-row", action="store_true", help="also print the per-row table (2b)")
    a = ap.parse_args()
    if not a.skip_des:
        des_table(a.des_requests, a.des_seed)
    if not a.skip_at_load:
        at_load(a.data)
    if a.per_row:
        per_row(a.data)
    headline()


if __name__ == "__main__":
    main()
