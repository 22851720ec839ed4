"""Closed-form server queue (serving.queue_metrics) against its discrete-event simulation (des.py).

For three workloads (ISL/OSL distributions of bundled MLPerf scenarios, a fixed decode step t_d and
a mean prefill service time S ∝ ISL) and a range of loads (prefill share ρ from 0.05 to 0.9, plus
two near-idle occupancies), it picks the mean occupancy B that gives ρ, takes the closed form's
arrival rate λ(B), simulates Poisson arrivals at that λ and prints the DES figures with the signed
error of the closed form, (model − DES)/DES, in %. Occupancy compares B with the DES's time-averaged
number of requests in the engine (Little's law).

    python benchmarks/queueing.py [--requests 100000] [--seeds 1] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infersim import des, serving  # noqa: E402
from infersim.specs import catalog  # noqa: E402

# (label, scenario whose workload is used, t_d seconds, mean prefill service time S seconds)
WORKLOADS = [
    ("llama2-70b", "mlperf-llama2-70b-server", 0.040, 0.008),    # ISL 222 (p99 791), OSL 294 fixed
    ("deepseek-r1", "mlperf-deepseek-r1-server", 0.050, 0.015),  # ISL 804, OSL 3752 heavy-tailed (cv 1.0)
    ("llama3.1-8b", "mlperf-llama3.1-8b-server", 0.010, 0.010),  # ISL 871, OSL 128: prefill-heavy, S = t_d
]
LOADS = [0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
IDLE_B = [0.1, 1.0]


def batch_for(rho: float, osl_mean: float, t_d: float, s_mean: float, L: float = 1.0) -> float:
    """Occupancy B at which the closed form's prefill share λ·E[S] equals ρ."""
    return rho / (1.0 - rho) * osl_mean * t_d / (L * s_mean)


def closed_form(workload, t_d: float, s_mean: float, batch: float, L: float = 1.0, q: float = 0.99) -> dict:
    stats = serving.WorkloadStats.from_workload(workload)
    s_sq = s_mean**2 * stats.isl_sq / stats.isl_mean**2
    r = serving.queue_metrics(np.array([t_d]), np.array([s_mean]), np.array([s_sq]), np.array([float(batch)]), L,
                              stats, q, None)
    return {k: float(np.ravel(getattr(r, k))[0]) for k in
            ("rate", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99", "e2e_p99", "tokens_per_s", "prefill_share")}


def simulate(workload, t_d: float, s_mean: float, rate: float, L: float, n: int, seeds: int) -> dict:
    keys = ("ttft_mean", "ttft_p", "tpot_p", "e2e_p", "occupancy", "tokens_per_s", "prefill_share", "idle_share")
    runs = [des.simulate_workload(workload, rate, t_d, s_mean, L, n_requests=n, seed=s) for s in range(seeds)]
    out = {k: float(np.mean([getattr(r, k) for r in runs])) for k in keys}
    out["wall_s"] = sum(r.wall_s for r in runs)
    out["simulated"] = sum(r.n_simulated for r in runs)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000, help="requests measured per DES run")
    ap.add_argument("--seeds", type=int, default=1, help="independent DES runs averaged per row")
    ap.add_argument("--quick", action="store_true", help="20k requests, loads 0.1/0.4/0.7 only")
    args = ap.parse_args(argv)
    n = 20_000 if args.quick else args.requests
    loads = [0.1, 0.4, 0.7] if args.quick else LOADS
    t_all = time.perf_counter()
    print(f"DES: {n} requests measured per run x {args.seeds} seed(s); error = (model - DES)/DES; L = 1")
    hdr = (f"{'workload':12s} {'rho':>5s} {'B':>9s} {'lambda/s':>9s} | {'TTFT mean ms':>15s} | {'TTFT p99 ms':>15s} | "
           f"{'TPOT p99 ms':>14s} | {'e2e p99 s':>14s} | {'occupancy':>16s} | {'tokens/s':>15s} | {'rho DES':>7s} "
           f"{'idle':>5s} | {'DES s':>5s}")
    print(hdr)
    print("-" * len(hdr))
    for label, scenario, t_d, s_mean in WORKLOADS:
        wl = catalog.load("scenario", scenario).workload
        rows = [(None, b) for b in IDLE_B] + [(rho, batch_for(rho, wl.osl.mean, t_d, s_mean)) for rho in loads]
        for rho, batch in rows:
            m = closed_form(wl, t_d, s_mean, batch)
            d = simulate(wl, t_d, s_mean, m["rate"], 1.0, n, args.seeds)

            def cell(model, sim, scale=1.0, width=15):
                v = sim * scale
                txt = f"{v:.1f} {100 * (model / sim - 1):+5.1f}%" if abs(v) >= 10 else f"{v:#.3g} {100 * (model / sim - 1):+5.1f}%"
                return f"{txt:>{width}s}"

            print(f"{label:12s} {m['prefill_share']:5.3f} {batch:9.1f} {m['rate']:9.2f} | "
                  f"{cell(m['ttft_mean'], d['ttft_mean'], 1e3)} | {cell(m['ttft_p99'], d['ttft_p'], 1e3)} | "
                  f"{cell(m['tpot_p99'], d['tpot_p'], 1e3, 14)} | {cell(m['e2e_p99'], d['e2e_p'], 1.0, 14)} | "
                  f"{cell(batch, d['occupancy'], 1.0, 16)} | {cell(m['tokens_per_s'], d['tokens_per_s'], 1.0)} | "
                  f"{d['prefill_share']:7.3f} {max(d['idle_share'], 0.0):5.3f} | {d['wall_s']:5.2f}", flush=True)
        print()
    print(f"wall time: {time.perf_counter() - t_all:.1f} s")


if __name__ == "__main__":
    main()
