"""How the front end's dispatch to several instances changes the TTFT of long prompts: a small Monte
Carlo of the instances' prefill queues alone, against the at-load measurement of a run.

Each instance prefills its prompts first come, first served at ``budget`` prompt tokens per
iteration of ``iteration_s`` (chunked prefill, work-conserving: a fluid server of budget /
iteration tokens/s); a request's TTFT is its wait, its own prefill and one iteration for its first
token; after it a request stays in flight for ``decode_s`` (its decode). Poisson arrivals at ``qps``
for the whole system, prompt lengths drawn from the scenario's distribution; dispatch:

- ``random``: each request to a uniformly random instance (the round presets' ``instance_dispatch``);
- ``fewest_requests``: to the instance with the fewest requests in flight (the NVIDIA harness's
  Server default, ``load_balancing``);
- ``fewest_tokens``: to the instance with the fewest pending input tokens (the harness's
  ``isl_load_balancing``, set by NVIDIA's v6.0 Llama-3.1-405B Server run).

Defaults are that run's: B300 × 8 as TP2 × 4, 2.31 q/s, a 1,024-token budget less its ~44 decoding
sequences per instance, ~120 ms per iteration (its measured TPOT), 637 output tokens; measured there:
TTFT p50 1.75 s, p99 4.45 s. It leaves out the decode's own share of each iteration and the model's
step costs: it isolates the queueing discipline. Run: ``python benchmarks/prefill_dispatch.py
[--scenario mlperf-llama3.1-405b-server] [--qps 2.31] [--instances 4] [--budget 980]
[--iteration-s 0.120] [--decode-s 76.4] [--requests 60000] [--seed 3]``. It asserts nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infersim import des, serving  # noqa: E402
from infersim.specs import catalog  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="mlperf-llama3.1-405b-server")
    ap.add_argument("--qps", type=float, default=2.31)
    ap.add_argument("--instances", type=int, default=4)
    ap.add_argument("--budget", type=float, default=980.0, help="prompt tokens per iteration per instance")
    ap.add_argument("--iteration-s", type=float, default=0.120)
    ap.add_argument("--decode-s", type=float, default=637 * 0.120)
    ap.add_argument("--requests", type=int, default=60_000)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    st = serving.WorkloadStats.from_workload(catalog.load("scenario", args.scenario).workload)
    x = np.asarray(st.isl_points, dtype=float)
    p = np.asarray(st.isl_probs, dtype=float) / np.sum(st.isl_probs)
    rng = np.random.default_rng(args.seed)
    arrivals = np.cumsum(rng.exponential(1.0 / args.qps, args.requests))
    isl = x[rng.choice(len(x), args.requests, p=p)]
    rate = args.budget / args.iteration_s
    load = args.qps * float(np.sum(p * x)) / (args.instances * rate)
    print(f"{args.scenario}: {args.qps} q/s over {args.instances} instances, prefill utilization {load:.2f}")
    for policy in des.DISPATCH_SIM_POLICIES:
        s = des.simulate_dispatch(policy, arrivals, isl, args.instances, rate, args.iteration_s, args.decode_s, rng)[args.requests // 10:]
        print(f"  {policy:16s} TTFT p50 {np.median(s):5.2f} s, mean {s.mean():5.2f} s, p99 {np.percentile(s, 99):5.2f} s")


if __name__ == "__main__":
    main()
