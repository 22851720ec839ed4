"""Where a prompt's TTFT goes when chunked prefill runs under the attention-DP gate: the discrete-event
engine's own record of each request against the closed form's terms, on the test grid's engines
(tests/test_scheduler.py: synthetic costs, d = 8, a 512-token chunked budget, gates 6/2 and 9/3).

Per case (router, gate, load of the closed form's capacity), at the case's arrival rate:

- mean TTFT, closed form and DES (``--seeds`` × ``--requests``);
- the admissions a prompt misses because the prompts ahead of it on its rank fill the budget: DES
  share missing at least one and mean missed, against the closed form's budget wait E[K] (in
  periods; it also carries the straddlers' extra iteration as a share of a period);
- the share of prompts that straddle the budget (first token one iteration after their admission);
- the backlog a tagged prompt finds on its rank at its first admission (prompts already waiting at
  the admission before): DES share and mean when present, against the closed form's P(a rank
  carries a backlog) and mean backlog over that share (``scheduler.capped_tokens``);
- the same backlog averaged over every rank at every admitting iteration ("rank average"): under
  the random router a prompt's rank is any rank, so it finds the rank average; the balanced router
  sends it to the ranks holding the fewest requests and prompt tokens, so it finds less than the
  rank average, while the closed form takes the rank average for both.

The closed form's internal terms are read by wrapping ``scheduler.budget_wait`` (a study script, not
an interface). Run: ``python benchmarks/gated_chunked_wait.py [--routers balanced,random]
[--gates 6/2,9/3] [--loads 0.3,0.6,0.9] [--seeds 2] [--requests 48000]``. It asserts nothing;
figures go to the README and the closing notes, measured.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the grid is defined once, in the test module

import test_scheduler as grid  # noqa: E402

from infersim import des, scheduler  # noqa: E402

D = 8


def model_terms(eng, batch):
    """The closed form at ``batch`` with the arguments and result of its budget wait."""
    seen = {}
    inner = scheduler.budget_wait

    def wrapped(stats, count, cap, p_over, backlog, stable, start=None, start_var=0.0, fit=None, **kw):
        out = inner(stats, count, cap, p_over, backlog, stable, start, start_var, fit, **kw)
        seen.update(p_over=p_over, backlog=backlog, wait=out)
        return out

    scheduler.budget_wait = wrapped
    try:
        res = grid.closed(eng, D, batch)
    finally:
        scheduler.budget_wait = inner
    return res, seen


def rank_average_backlog(rec: dict, d: int, warm: float = 1 / 6, tail: float = 1 / 20) -> np.ndarray:
    """Backlog (prompt tokens already waiting at the admission before) of every rank at every
    admitting iteration of a DES run (``des.simulate_engine(requests=)``), the run's first ``warm``
    and last ``tail`` shares of those iterations dropped: shape (iterations, d)."""
    arrive, admit = rec["arrival_iter"], rec["admit_iter"]
    ok = admit >= 0
    adm = np.unique(admit[ok])
    back = np.zeros((len(adm), d))
    # a prompt is waiting at admission i (after the one before, adm[i - 1], saw it queued) until
    # the admission that takes it: i from the first with adm[i - 1] >= its arrival to the last
    # with adm[i] <= its own admission
    first = np.searchsorted(adm, arrive[ok], side="left") + 1
    last = np.searchsorted(adm, admit[ok], side="right") - 1
    for f, g, r, p in zip(first, last, rec["rank"][ok], rec["prompt_tokens"][ok]):
        if g >= f:
            back[f:g + 1, r] += p
    return back[int(len(adm) * warm):len(adm) - int(len(adm) * tail)]


def case(router: str, gate: str, load: float, seeds: int, requests: int) -> None:
    st = grid.stats()
    eng, batch, r = grid.placed(D, gate, "chunk512", load, router)
    rate = float(r.rate[0])
    res, seen = model_terms(eng, batch)
    one = lambda a: float(np.ravel(a)[0])  # noqa: E731
    p_over, backlog, e_k = one(seen["p_over"]), one(seen["backlog"]), one(seen["wait"][0])
    ttft, missed, straddle, back, ranks = [], [], [], [], []
    for s in range(1, seeds + 1):
        rec: dict = {}
        sim = des.simulate_engine(rate, D, eng, grid.decode_time, grid.S_TOK, (st.isl_points, st.isl_probs), grid.OSL,
                                  n_requests=requests, percentile=100 * grid.Q, seed=s, requests=rec)
        m = rec["measured"] & (rec["ahead_tokens"] >= 0)
        adm_iters = np.unique(rec["admit_iter"][rec["admit_iter"] >= 0])  # iterations that admitted a prompt
        # admissions passed between arrival and own admission (iterations that admitted other prompts)
        passed = np.searchsorted(adm_iters, rec["admit_iter"][m]) - np.searchsorted(adm_iters, rec["arrival_iter"][m])
        ttft.append(sim.ttft_mean)
        missed.append(passed)
        straddle.append(rec["first_iter"][m] > rec["admit_iter"][m])
        back.append(rec["backlog_tokens"][m])
        ranks.append(rank_average_backlog(rec, D).ravel())
    missed, straddle, back, ranks = (np.concatenate(x) for x in (missed, straddle, back, ranks))
    des_ttft = float(np.mean(ttft))
    has = back > 0
    print(f"{router:>8s} {gate} {int(100 * load):3d} % | TTFT model {1e3 * one(res.ttft_mean):6.1f} ms, DES {1e3 * des_ttft:6.1f} "
          f"({100 * (one(res.ttft_mean) / des_ttft - 1):+5.1f} %) | missed DES P {np.mean(missed >= 1):.3f} mean {missed.mean():.3f}, "
          f"model E[K] {e_k:.3f} | straddle DES {straddle.mean():.2f} | backlog DES P {has.mean():.3f} "
          f"mean|>0 {back[has].mean() if has.any() else 0.0:5.0f} (rank average P {np.mean(ranks > 0):.3f} "
          f"mean|>0 {ranks[ranks > 0].mean() if np.any(ranks > 0) else 0.0:5.0f}), model P {p_over:.3f} "
          f"mean|>0 {backlog / max(p_over, 1e-12):5.0f}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--routers", default="balanced,random")
    ap.add_argument("--gates", default="6/2,9/3")
    ap.add_argument("--loads", default="0.3,0.6,0.9")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--requests", type=int, default=48_000)
    args = ap.parse_args()
    t0 = time.perf_counter()
    for router in args.routers.split(","):
        for gate in args.gates.split(","):
            for load in (float(x) for x in args.loads.split(",")):
                case(router, gate, load, args.seeds, args.requests)
    print(f"{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
