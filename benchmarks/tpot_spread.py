"""TPOT quantiles of long outputs: the closed form (scheduler.engine_queue, with the decode count's
drift of serving.decode_drift) against the discrete-event engine (des.simulate_engine).

One rank, no token budget, synthetic step costs (10 ms + 50 us per decoding sequence, 20 us per
prompt token, as tests/test_scheduler.py), Llama-2-70B Server prompt lengths, output-length mixes
and loads (shares of the closed form's capacity) as given. Prints, per case, the closed form's mean
and p99 TPOT, the DES's mean, p50 and p99, and the p99 error.

    python benchmarks/tpot_spread.py                                  # 200-400 and 50-1,600 tokens
    python benchmarks/tpot_spread.py --osl 250 --requests 48000 --seeds 3,4
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from infersim import des, scheduler, serving
from infersim.plan import Engine
from infersim.specs import catalog

T0, T1, S_TOK, Q = 0.010, 50e-6, 20e-6, 0.99


def case(osl: np.ndarray, cap: int, load: float, requests: int, seed: int) -> str:
    probs = np.full(len(osl), 1.0 / len(osl))
    base = serving.WorkloadStats.from_workload(catalog.load("scenario", "mlperf-llama2-70b-server").workload)
    st = dataclasses.replace(base, osl_mean=float(osl.mean()), osl_sq=float(np.mean(osl**2)), osl_points=osl,
                             osl_probs=probs, osl_p99=float(osl.max()))
    step = lambda rows: T0 + T1 * np.asarray(rows, dtype=float)  # noqa: E731
    pre = lambda n, imb: S_TOK * st.isl_mean * imb  # noqa: E731
    eng = Engine(max_batch_size=cap, max_num_tokens=None, chunked_prefill=True, gate_timeout_iters=0,
                 gate_wait_iters=0, graph_sizes=None)
    b = np.geomspace(1.0, cap, 200)
    r = scheduler.engine_queue(eng, 1, b, st, 1.0, Q, step, pre)
    rate = np.where(r.ok, r.rate, 0.0)
    i = int(np.argmax(rate))
    batch = float(np.interp(load * rate[i], rate[: i + 1], b[: i + 1]))
    m = scheduler.engine_queue(eng, 1, np.array([batch]), st, 1.0, Q, step, pre)
    sim = des.simulate_engine(float(m.rate[0]), 1, eng, step, S_TOK, (st.isl_points, st.isl_probs), (osl, probs),
                              n_requests=requests, percentile=100 * Q, seed=seed)
    return (f"cap {cap:4d} load {load:.1f} seed {seed}  closed form mean {1e3 * m.tpot_mean[0]:6.2f} p99 "
            f"{1e3 * m.tpot_p99[0]:6.2f} ms | DES mean {1e3 * sim.tpot_mean:6.2f} p50 {1e3 * sim.tpot_p50:6.2f} p99 "
            f"{1e3 * sim.tpot_p:6.2f} ms (p99/p50 {sim.tpot_p / sim.tpot_p50:.3f}) | p99 error "
            f"{100 * (m.tpot_p99[0] / sim.tpot_p - 1):+5.1f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--osl", action="append", help="comma-separated output lengths, equally likely (repeatable)")
    ap.add_argument("--loads", default="0.3,0.6,0.9")
    ap.add_argument("--caps", default="256,512")
    ap.add_argument("--requests", type=int, default=24000)
    ap.add_argument("--seeds", default="3")
    args = ap.parse_args()
    for mix in args.osl or ["200,300,400", "50,100,200,400,800,1600"]:
        osl = np.array([float(x) for x in mix.split(",")])
        print(f"output lengths {mix}")
        for cap in (int(c) for c in args.caps.split(",")):
            for load in (float(x) for x in args.loads.split(",")):
                for seed in (int(s) for s in args.seeds.split(",")):
                    print("  " + case(osl, cap, load, args.requests, seed), flush=True)


if __name__ == "__main__":
    main()
