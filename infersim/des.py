"""Discrete-event simulation of the abstract serving queue of ``serving.queue_metrics`` (a test oracle).

The server: one aggregated continuous-batching engine runs cycles back to back. Each cycle is a
decode step of fixed duration ``t_d`` plus the prefill service times S_i of every request that was
waiting at the cycle's start (gated admission: a request arriving during a cycle waits for the
next). A request's first token arrives at the end of its prefill cycle; it then stays for
m = ceil((OSL − 1)/L) decode cycles (L output tokens per sequence per cycle) and completes at the
end of the last one. When nothing is running and nothing waits, the engine idles and starts a
cycle at the next arrival. Arrivals are a renewal process: Poisson, or gamma-distributed gaps of a
given squared coefficient of variation (``arrival_gaps``). The decode step time does not depend on the
number of running sequences (the analytical model evaluates it at the mean occupancy B), so the
cycle process is independent of the occupancy except through idling.

Metrics, over a measurement window preceded by a warm-up and followed by a cool-down (arrivals go
on, so the window's requests finish under load): TTFT = first token − arrival; TPOT of a request =
(completion − first token)/(m·L), the mean of its decode cycles over L (equal to MLPerf's
(completion − first token)/(OSL − 1) for L = 1 and integer OSL); occupancy = time-averaged number
of requests in the engine (from the start of their prefill cycle to completion; Little's law:
λ × time in the engine); decode_batch = mean number of decoding sequences per cycle (what the
decode step is costed at); throughput = output tokens completed per second in the window.

The engine loop runs in Python, one iteration per prefill cycle or per run of pure decode cycles
(which are skipped in one step), so its cost is about linear in the number of requests and
independent of the output length.
"""

from __future__ import annotations

import heapq
import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from .plan import admission_period


@dataclass
class Trace:
    """Raw simulation output: per-request times and the engine's cycles (seconds, cycle indices).

    Cycles are stored as segments of equal-length cycles: segment j covers cycle indices
    ``seg_k0[j] … seg_k0[j] + seg_n[j] − 1``, starting at ``seg_t0[j]``, each ``seg_dur[j]`` long.
    """

    arrival: np.ndarray
    admit: np.ndarray
    """Index of the cycle that prefilled the request."""
    m: np.ndarray
    """Decode cycles after the first token."""
    start: np.ndarray
    """Start of the prefill cycle."""
    first: np.ndarray
    """First-token time (end of the prefill cycle)."""
    finish: np.ndarray
    """Completion time (end of the last decode cycle)."""
    seg_k0: np.ndarray
    seg_t0: np.ndarray
    seg_n: np.ndarray
    seg_dur: np.ndarray
    prefill_k: np.ndarray
    """Indices of the cycles that carried prefills."""
    prefill_work: np.ndarray
    """Prefill service time in each of those cycles."""

    def cycle_end(self, k):
        """End time of cycle(s) ``k`` (vectorized)."""
        k = np.asarray(k)
        j = np.searchsorted(self.seg_k0, k, side="right") - 1
        return self.seg_t0[j] + (k - self.seg_k0[j] + 1) * self.seg_dur[j]

    def cycle_start(self, k):
        k = np.asarray(k)
        j = np.searchsorted(self.seg_k0, k, side="right") - 1
        return self.seg_t0[j] + (k - self.seg_k0[j]) * self.seg_dur[j]


def _percentile(x: np.ndarray, q: float) -> float:
    """``np.percentile``, but infinite where any sample is (numpy interpolates inf − inf to NaN,
    and a NaN p99 would pass every latency limit)."""
    return float(np.percentile(x, q)) if np.all(np.isfinite(x)) else float("inf")


def run(arrivals, service, decode_cycles, t_d: float) -> Trace:
    """Simulate the engine for given arrival times (sorted), prefill service times and decode
    cycle counts per request. Deterministic; every request runs to completion."""
    if not t_d > 0:
        raise ValueError("t_d must be > 0")
    arrivals = np.asarray(arrivals, dtype=float)
    service = np.asarray(service, dtype=float)
    m = np.asarray(decode_cycles, dtype=np.int64)
    n = len(arrivals)
    if not (len(service) == len(m) == n) or n == 0:
        raise ValueError("arrivals, service and decode_cycles must be non-empty and of equal length")
    if np.any(np.diff(arrivals) < 0):
        raise ValueError("arrivals must be sorted")
    arr = arrivals.tolist()
    cs = np.concatenate([[0.0], np.cumsum(service)]).tolist()
    ml = m.tolist()
    seg_k0, seg_t0, seg_n, seg_dur = [], [], [], []
    adm_k, adm_hi = [], []
    ptr, k, last, tau = 0, 0, -1, arr[0]
    while ptr < n:
        hi = bisect_right(arr, tau, ptr)
        if hi > ptr:  # a cycle with prefills: everyone waiting at its start
            d = t_d + (cs[hi] - cs[ptr])
            mk = k + max(ml[ptr:hi])
            if mk > last:
                last = mk
            adm_k.append(k)
            adm_hi.append(hi)
            seg_k0.append(k), seg_t0.append(tau), seg_n.append(1), seg_dur.append(d)
            tau += d
            k += 1
            ptr = hi
        elif last >= k:  # pure decode cycles up to the one during which the next request arrives
            j = int((arr[ptr] - tau) / t_d) + 1
            j = min(j, last - k + 1)
            seg_k0.append(k), seg_t0.append(tau), seg_n.append(j), seg_dur.append(t_d)
            tau += j * t_d
            k += j
        else:  # idle until the next arrival
            tau = arr[ptr]
    if last >= k:
        seg_k0.append(k), seg_t0.append(tau), seg_n.append(last - k + 1), seg_dur.append(t_d)
    adm_k = np.array(adm_k, dtype=np.int64)
    adm_hi = np.array(adm_hi, dtype=np.int64)
    counts = np.diff(np.concatenate([[0], adm_hi]))
    admit = np.repeat(adm_k, counts)
    seg = dict(seg_k0=np.array(seg_k0, dtype=np.int64), seg_t0=np.array(seg_t0), seg_n=np.array(seg_n, dtype=np.int64),
               seg_dur=np.array(seg_dur))
    cs = np.asarray(cs)
    work = cs[adm_hi] - cs[adm_hi - counts]
    tr = Trace(arrival=arrivals, admit=admit, m=m, start=np.empty(0), first=np.empty(0), finish=np.empty(0),
               prefill_k=adm_k, prefill_work=work, **seg)
    tr.start = tr.cycle_start(admit)
    tr.first = tr.cycle_end(admit)
    tr.finish = tr.cycle_end(admit + m)
    return tr


@dataclass
class DesResult:
    """Steady-state figures of one simulation (seconds, requests/s, tokens/s)."""

    rate: float
    """Arrival rate, requests/s."""
    ttft_mean: float
    ttft_p: float
    """TTFT at the requested percentile."""
    tpot_mean: float
    tpot_p: float
    e2e_mean: float
    """End-to-end latency (completion − arrival)."""
    e2e_p: float
    occupancy: float
    """Time-averaged number of requests in the engine (prefill cycle to completion)."""
    decode_batch: float
    """Mean number of decoding sequences per engine cycle."""
    tokens_per_s: float
    """Output tokens completed per second."""
    prefill_share: float
    """Fraction of time spent on prefill work (Σ S over time)."""
    idle_share: float
    """Fraction of time the engine idles."""
    cycle_mean: float
    cycle_var: float
    n_requests: int
    """Requests measured (arrived in the window)."""
    n_simulated: int
    wall_s: float
    trace: Trace | None = None


def arrival_gaps(rng, rate: float, n: int, scv: float = 1.0) -> np.ndarray:
    """``n`` inter-arrival gaps of a renewal process at ``rate`` with squared coefficient of
    variation ``scv``: gamma of shape 1/scv (exponential, i.e. Poisson arrivals, at scv = 1;
    evenly spaced at scv = 0)."""
    if scv <= 0:
        return np.full(n, 1.0 / rate)
    if scv == 1.0:
        return rng.exponential(1.0 / rate, n)
    return rng.gamma(1.0 / scv, scv / rate, n)


def decode_cycles(osl, L: float = 1.0):
    """m = ceil((OSL − 1)/L) decode cycles after the first token (0 for OSL ≤ 1)."""
    return np.maximum(np.ceil((np.asarray(osl, dtype=float) - 1.0) / L - 1e-9), 0).astype(np.int64)


def service_support(isl_points, isl_probs, s_mean: float):
    """Prefill service-time distribution S = s_mean · ISL / E[ISL] as (points, probabilities)."""
    isl_points = np.asarray(isl_points, dtype=float)
    isl_probs = np.asarray(isl_probs, dtype=float) / np.sum(isl_probs)
    return s_mean * isl_points / np.sum(isl_probs * isl_points), isl_probs


def simulate(rate: float, t_d: float, service: tuple, osl: tuple, L: float = 1.0, *, n_requests: int = 20000,
             percentile: float = 99.0, seed: int = 0, warmup_s: float | None = None, cooldown_s: float | None = None,
             keep_trace: bool = False, arrival_scv: float = 1.0) -> DesResult:
    """Simulate renewal arrivals at ``rate`` (Poisson by default; gamma gaps of squared coefficient
    of variation ``arrival_scv`` otherwise) into the engine and measure the steady state.

    ``service`` and ``osl`` are (points, probabilities) of the prefill service time (s) and of the
    output length (tokens), drawn independently per request. About ``n_requests`` requests arrive
    in the measurement window. The warm-up and cool-down default to the longest request's life
    (max decode cycles × the mean cycle t_d/(1 − λE[S])) plus a tenth of the window, so the
    occupancy is stationary over the whole window and every measured request finishes under load.
    """
    t0 = time.perf_counter()
    s_pts, s_pr = (np.asarray(a, dtype=float) for a in service)
    o_pts, o_pr = (np.asarray(a, dtype=float) for a in osl)
    s_pr, o_pr = s_pr / s_pr.sum(), o_pr / o_pr.sum()
    rho = rate * float(np.sum(s_pr * s_pts))
    if not rate > 0 or rho >= 1.0:
        raise ValueError(f"unstable or empty: rate={rate}, prefill load λE[S]={rho:.3f} (needs 0 < rate, λE[S] < 1)")
    window = n_requests / rate
    life = (int(decode_cycles(o_pts.max(), L)) + 2) * t_d / (1.0 - rho)
    warmup_s = 1.1 * life + 0.1 * window if warmup_s is None else warmup_s
    cooldown_s = 1.1 * life + 0.1 * window if cooldown_s is None else cooldown_s
    horizon = warmup_s + window + cooldown_s
    rng = np.random.default_rng(seed)
    expect = rate * horizon
    gaps = arrival_gaps(rng, rate, int(expect + 6 * np.sqrt(expect * max(arrival_scv, 1.0)) + 16), arrival_scv)
    arrivals = np.cumsum(gaps)
    arrivals = arrivals[arrivals < horizon]
    n = len(arrivals)
    s = s_pts[rng.choice(len(s_pts), n, p=s_pr)] if len(s_pts) > 1 else np.full(n, s_pts[0])
    o = o_pts[rng.choice(len(o_pts), n, p=o_pr)] if len(o_pts) > 1 else np.full(n, o_pts[0])
    m = decode_cycles(o, L)
    tr = run(arrivals, s, m, t_d)

    w0, w1 = warmup_s, warmup_s + window
    sel = (arrivals >= w0) & (arrivals < w1)
    ttft = (tr.first - arrivals)[sel]
    dec = sel & (m > 0)
    tpot = ((tr.finish - tr.first)[dec]) / (m[dec] * L)
    e2e = (tr.finish - arrivals)[sel]
    q = percentile
    # the window's cycles: from the first one starting at or after w0 to the last one ending by w1
    ends = tr.seg_t0 + tr.seg_n * tr.seg_dur
    j0 = int(np.searchsorted(tr.seg_t0, w0, side="left"))
    j1 = int(np.searchsorted(ends, w1, side="right")) - 1
    if j1 < j0 or not sel.any():
        raise ValueError("no engine cycle or arrival in the measurement window: raise n_requests")
    k_lo, k_hi = int(tr.seg_k0[j0]), int(tr.seg_k0[j1] + tr.seg_n[j1] - 1)
    t_lo, t_hi = float(tr.seg_t0[j0]), float(ends[j1])
    span = t_hi - t_lo
    n_cycles = k_hi - k_lo + 1
    busy = float(np.sum(tr.seg_n[j0:j1 + 1] * tr.seg_dur[j0:j1 + 1]))
    cyc_sq = float(np.sum(tr.seg_n[j0:j1 + 1] * tr.seg_dur[j0:j1 + 1] ** 2))
    cycle_mean = busy / n_cycles
    cycle_var = cyc_sq / n_cycles - cycle_mean**2
    occ = np.clip(np.minimum(tr.finish, t_hi) - np.maximum(tr.start, t_lo), 0.0, None).sum() / span
    # decode cycles of each request inside [k_lo, k_hi]; output tokens: 1 at the first token, then
    # (OSL − 1)/m per decode cycle
    d_in = np.clip(np.minimum(tr.admit + m, k_hi) - np.maximum(tr.admit + 1, k_lo) + 1, 0, None)
    first_in = (tr.admit >= k_lo) & (tr.admit <= k_hi)
    tokens = first_in.sum() + np.sum(np.where(m > 0, (o - 1.0) * d_in / np.maximum(m, 1), 0.0))
    pk = (tr.prefill_k >= k_lo) & (tr.prefill_k <= k_hi)
    return DesResult(
        rate=rate, ttft_mean=float(ttft.mean()), ttft_p=_percentile(ttft, q),
        tpot_mean=float(tpot.mean()) if len(tpot) else float("nan"),
        tpot_p=_percentile(tpot, q) if len(tpot) else float("nan"),
        e2e_mean=float(e2e.mean()), e2e_p=_percentile(e2e, q),
        occupancy=float(occ), decode_batch=float(d_in.sum() / n_cycles), tokens_per_s=float(tokens / span),
        prefill_share=float(tr.prefill_work[pk].sum() / span), idle_share=max(0.0, float(1.0 - busy / span)),
        cycle_mean=cycle_mean, cycle_var=cycle_var, n_requests=int(sel.sum()), n_simulated=n,
        wall_s=time.perf_counter() - t0, trace=tr if keep_trace else None)


def simulate_workload(workload, rate: float, t_d: float, s_mean: float, L: float = 1.0, **kw) -> DesResult:
    """``simulate`` with ISL/OSL drawn from a ``WorkloadSpec``'s discrete supports; the prefill
    service time is proportional to the ISL (S = s_mean · ISL / E[ISL])."""
    xi, pi = workload.isl.support
    return simulate(rate, t_d, service_support(xi, pi, s_mean), workload.osl.support, L, **kw)


# ---- the iteration-level engine with d attention ranks (oracle of infersim.scheduler) --------------

@dataclass
class EngineDes:
    """Steady-state figures of one engine simulation (seconds, requests/s, tokens/s)."""

    rate: float
    ttft_mean: float
    ttft_p: float
    ttft_p50: float
    tpot_mean: float
    tpot_p: float
    tpot_p50: float
    occupancy: float
    """Time-averaged sequences admitted and not finished (Little's law: rate × time in engine): from
    the start of the iteration that admits a prompt (its first chunk, chunked) to the end of its last
    decode iteration."""
    tokens_per_s: float
    iteration_mean: float
    gate_iters: float
    """Mean iterations between admitting iterations that admitted a prompt."""
    busiest_prompt_tokens: float
    """Mean prompt tokens of the busiest rank in iterations that carried prompts."""
    slot_wait_share: float
    """Share of requests that waited for a free slot (the batch cap) at an admitting iteration."""
    budget_spill_share: float
    """Share of admitting iterations where a rank left a prompt waiting for lack of token budget."""
    blocked: bool
    """A prompt did not fit, alone, the budget left beside its rank's decode tokens (non-chunked)."""
    n_requests: int
    wall_s: float
    e2e_mean: float = float("nan")
    """Mean arrival-to-last-token time of the measured requests, s."""
    e2e_p: float = float("nan")
    """Its ``percentile`` quantile, s."""
    e2e_p50: float = float("nan")
    decode_batch: float = float("nan")
    """Time-averaged sequences decoding (past their first token): the occupancy less the prompts in
    their prefill iteration(s)."""
    decode_rows: float = float("nan")
    """Mean over iterations of the rows a decode iteration is costed at (busiest rank's decoding
    sequences, padded to the captured graph size)."""


class ShortestFirst:
    """A rank's waiting prompts served shortest prompt first (vLLM ``--scheduling-policy=sjf`` as
    the v6.0 Qwen3-VL recipes run it), ties in arrival order; the deque interface the DES uses."""

    def __init__(self, key):
        self._key, self._heap = key, []

    def append(self, req):
        heapq.heappush(self._heap, (float(self._key[req]), req))

    def popleft(self):
        return heapq.heappop(self._heap)[1]

    def __getitem__(self, i):
        if i != 0:
            raise IndexError("only the head of a waiting queue is read")
        return self._heap[0][1]

    def __len__(self):
        return len(self._heap)

    def __iter__(self):
        return (req for _, req in self._heap)


def _route(new, rank, plen, counts, active_tokens):
    """TensorRT-LLM's attention-DP router for the requests fetched in one iteration: each rank is
    filled up to the water level max(ceil((active + new)/d), busiest rank's active requests); among
    the ranks below it the one with the fewest active prompt tokens takes the next request, the
    longest prompts first (``rank`` is written in place)."""
    d = len(counts)
    level = max(-(-(sum(counts) + len(new)) // d), max(counts))
    heap = [(active_tokens[r], counts[r], r) for r in range(d) if counts[r] < level]
    heapq.heapify(heap)
    for req in sorted(new, key=lambda i: -plen[i]):
        tok, c, r = heapq.heappop(heap)
        rank[req] = r
        if c + 1 < level:
            heapq.heappush(heap, (tok + plen[req], c + 1, r))


def simulate_engine(rate: float, d: int, engine, decode_time, s_tok: float, isl: tuple, osl: tuple, L: float = 1.0, *,
                    n_requests: int = 20000, percentile: float = 99.0, seed: int = 0, dq: float = 1.0,
                    warmup_frac: float = 0.15, arrival_scv: float = 1.0, policy: str = "fcfs",
                    assignment: str | None = None, trace: list | None = None,
                    requests: dict | None = None) -> EngineDes:
    """Simulate renewal arrivals at ``rate`` (Poisson by default; gamma gaps of squared coefficient
    of variation ``arrival_scv`` otherwise) into an engine of ``d`` attention ranks.

    Each arrival joins a rank chosen uniformly at random and waits there, in arrival order
    (``policy`` "fcfs") or shortest prompt first ("sjf", ``ShortestFirst``). Every iteration
    starts with the admission decision: with ``engine.decode_steps`` = n > 1 (multi-step
    scheduling) only every n-th iteration admits (or any iteration while nothing runs); with the
    gate on (d > 1, ``engine.gate_timeout_iters`` > 0)
    TensorRT-LLM's attention-DP counters — if every rank has a waiting prompt and a free slot, the
    timeout counter resets and, while every rank also has a running sequence, admission is held
    ``gate_wait_iters`` iterations; otherwise the timeout counter grows and admission happens
    when it reaches ``gate_timeout_iters`` or some rank has no running sequence. Admitting ranks
    take waiting prompts in order while the rank has fewer than ``max_batch_size`` sequences and,
    non-chunked, the prompt fits the rank's budget left after its decode tokens
    (``max_num_tokens`` − running·dq); chunked, a rank prefills up to that budget per iteration and
    a prompt's first token comes with its last chunk. The iteration lasts
    ``decode_time(rows)``, rows = the most decoding sequences on a rank padded up to the next
    captured graph size (``engine.graph_sizes``; unpadded above the largest), plus
    ``s_tok`` × the busiest rank's prompt tokens in it. A sequence leaves after
    ceil((OSL − 1)/L) decode iterations following its first token.

    ``isl``/``osl``: (points, probabilities). Measures requests arriving after a warm-up share of
    the run and finishing before its end; the engine keeps receiving arrivals meanwhile.
    ``trace``: a list to which every measured iteration appends (its ranks' decoding sequences as
    a tuple, its duration in seconds), for studies of the iteration-level state
    (benchmarks/decode_dispersion.py).
    ``requests``: a dict filled, per request, with ``arrival_iter`` (the iteration at whose start it
    is first in a queue), ``admit_iter`` (the iteration that admits it), ``first_iter`` (the one
    that ends with its first token), ``ahead_tokens`` (the prompt tokens ahead of it on its rank at
    the first admission after its arrival, a chunked rest still running included; -1 if it saw none),
    ``backlog_tokens`` (of those, the prompts that were already waiting at the admission before),
    ``measured`` (the requests the result's figures count), ``rank`` and ``prompt_tokens`` (its
    rank and prompt length): benchmarks/gated_chunked_wait.py.
    """
    t0 = time.perf_counter()
    rng = np.random.default_rng(seed)
    xi, pi = (np.asarray(a, dtype=float) for a in isl)
    xo, po = (np.asarray(a, dtype=float) for a in osl)
    horizon = n_requests / rate
    total = int(n_requests * (1.0 + warmup_frac) * 1.25) + 64
    arr = np.cumsum(arrival_gaps(rng, rate, total, arrival_scv))
    arr = arr[arr < horizon * (1.0 + warmup_frac) * 1.2]
    n = len(arr)
    plen = xi[rng.choice(len(xi), n, p=pi / pi.sum())]
    olen = xo[rng.choice(len(xo), n, p=po / po.sum())]
    m = decode_cycles(olen, L)
    rank = rng.integers(0, d, n)
    assignment = assignment or engine.rank_router
    if assignment not in ("random", "balanced"):
        raise ValueError(f"assignment must be 'random' or 'balanced' (got {assignment!r})")
    balanced = assignment == "balanced" and d > 1
    active_tokens = [0.0] * d
    cap = engine.max_batch_size if engine.max_batch_size is not None else 1 << 30
    budget = engine.max_num_tokens
    gate = d > 1 and engine.gate_timeout_iters > 0
    sizes = list(engine.graph_sizes) if engine.graph_sizes else None
    T, W = engine.gate_timeout_iters, engine.gate_wait_iters
    steps = admission_period(engine)
    from collections import deque

    if policy not in ("fcfs", "sjf"):
        raise ValueError(f"policy must be 'fcfs' or 'sjf' (got {policy!r})")
    waiting = [deque() if policy == "fcfs" else ShortestFirst(plen) for _ in range(d)]
    running = [0] * d      # admitted, not finished (context or decode)
    decoding = [0] * d     # in decode phase
    chunk_left = [None] * d  # (request, tokens left) of a chunked prompt in progress per rank
    finish_heap = []       # (iteration index of the last decode, rank, request)
    first = np.full(n, np.nan)
    done = np.full(n, np.nan)
    record = requests is not None
    if record:
        arr_it, adm_it, first_it = (np.full(n, -1, dtype=np.int64) for _ in range(3))
        ahead_tok, back_tok = np.full(n, -1.0), np.zeros(n)
        prev_admit = -1
    slot_wait = np.zeros(n, dtype=bool)
    ptr, k, tau = 0, 0, 0.0
    wait_c = tmo_c = 0
    occ_area = dec_area = rows_sum = 0.0
    n_adm_iters = n_spill = 0
    last_adm_k, gaps, big_tokens = None, [], []
    it_time_sum, it_count = 0.0, 0
    blocked = False
    t_end = arr[-1]
    w0 = horizon * warmup_frac
    while tau < t_end:
        if balanced:
            new = []
            while ptr < n and arr[ptr] <= tau:
                new.append(ptr)
                ptr += 1
            if new:
                if record:
                    arr_it[new] = k
                _route(new, rank, plen, [running[r] + len(waiting[r]) for r in range(d)], active_tokens)
                for req in new:
                    waiting[rank[req]].append(req)
                    active_tokens[rank[req]] += plen[req]
        while ptr < n and arr[ptr] <= tau:  # random router: each request to its drawn rank
            if record:
                arr_it[ptr] = k
            waiting[rank[ptr]].append(ptr)
            ptr += 1
        if sum(running) == 0 and not any(waiting):
            tau = arr[ptr] if ptr < n else t_end
            continue
        has_ctx = [len(w) > 0 for w in waiting]
        if not gate:
            # multi-step scheduling: admission only at the first iteration of each group of
            # ``decode_steps`` iterations, or at once when the engine has nothing running
            admit = k % steps == 0 or sum(running) == 0
        else:
            all_gen = all(r > 0 for r in decoding)
            if all(has_ctx) and all(r < cap for r in running):
                tmo_c = 0
                if all_gen and wait_c < W:
                    wait_c += 1
                    admit = False
                else:
                    wait_c = 0
                    admit = True
            else:
                tmo_c += 1
                admit = False
                if tmo_c >= T or not all_gen:
                    tmo_c = 0
                    admit = True
        tokens = [0.0] * d
        firsts = []
        spilled = False
        took = False
        for r in range(d):
            free = np.inf if budget is None else budget - decoding[r] * dq
            if record and admit:  # the tokens ahead of each waiting prompt at its first admission
                ahead = chunk_left[r][1] if chunk_left[r] is not None else 0.0
                older = 0.0
                for req in waiting[r]:
                    if ahead_tok[req] < 0:
                        ahead_tok[req], back_tok[req] = ahead, older
                    ahead += plen[req]
                    if arr_it[req] <= prev_admit:
                        older += plen[req]
            if chunk_left[r] is not None:  # a chunked prompt continues whatever the gate says
                req, left = chunk_left[r]
                step = min(left, max(free, 0.0))
                tokens[r] += step
                free -= step
                if left - step <= 0:
                    firsts.append((req, r))
                    chunk_left[r] = None
                else:
                    chunk_left[r] = (req, left - step)
                    spilled = spilled or (admit and len(waiting[r]) > 0)
                    continue
            if not admit:
                continue
            w = waiting[r]
            while w and running[r] < cap:
                req = w[0]
                need = plen[req]
                if engine.chunked_prefill:
                    if free <= 0:
                        spilled = True
                        break
                    w.popleft()
                    if record:
                        adm_it[req] = k
                    running[r] += 1
                    took = True
                    step = min(need, free)
                    tokens[r] += step
                    free -= step
                    if need - step > 0:
                        chunk_left[r] = (req, need - step)
                        break
                    firsts.append((req, r))
                else:
                    if need > free:
                        spilled = True
                        blocked = blocked or tokens[r] == 0  # alone beside the rank's decode tokens
                        break
                    w.popleft()
                    if record:
                        adm_it[req] = k
                    running[r] += 1
                    took = True
                    tokens[r] += need
                    free -= need
                    firsts.append((req, r))
            if w and running[r] >= cap:
                for req in w:
                    slot_wait[req] = True
        rows = max(decoding)
        if sizes is not None and rows <= sizes[-1]:
            rows = sizes[bisect_left(sizes, rows)] if rows > 0 else sizes[0]
        t_it = float(decode_time(rows)) + s_tok * max(tokens)
        if trace is not None and tau >= w0:
            trace.append((tuple(decoding), t_it))
        if admit and (took or spilled):
            n_adm_iters += 1
            n_spill += spilled
        if admit and took:
            if last_adm_k is not None:
                gaps.append(k - last_adm_k)
            last_adm_k = k
            big_tokens.append(max(tokens))
        occ_area += sum(running) * t_it if tau >= w0 else 0.0
        if tau >= w0:
            dec_area += sum(decoding) * t_it
            rows_sum += rows
            it_time_sum += t_it
            it_count += 1
        tau += t_it
        if record and admit:
            prev_admit = k
        # sequences whose prompt completed: first token now, then m decode iterations
        for req, r in firsts:
            first[req] = tau
            if record:
                first_it[req] = k
            if m[req] == 0:
                done[req] = tau
                running[r] -= 1
                active_tokens[r] -= plen[req]
            else:
                decoding[r] += 1
                heapq.heappush(finish_heap, (k + m[req], r, req))
        while finish_heap and finish_heap[0][0] <= k:
            _, r, req = heapq.heappop(finish_heap)
            done[req] = tau
            active_tokens[r] -= plen[req]
            running[r] -= 1
            decoding[r] -= 1
        k += 1
    sel = (arr >= w0) & (arr < horizon * (1.0 + warmup_frac) * 0.95) & np.isfinite(done)
    if record:
        requests.update(arrival_iter=arr_it, admit_iter=adm_it, first_iter=first_it, ahead_tokens=ahead_tok,
                        backlog_tokens=back_tok, measured=sel, rank=rank.copy(), prompt_tokens=plen.copy())
    ttft = (first - arr)[sel]
    e2e = (done - arr)[sel]
    dec = sel & (m > 0)
    tpot = (done - first)[dec] / (m[dec] * L)
    if len(ttft) == 0 or len(tpot) == 0:  # nothing measured finished: the engine is stuck or saturated
        ttft = tpot = np.array([np.inf])
    span = it_time_sum
    q = percentile
    tokens_out = float(np.sum(olen[(done >= w0) & (done <= w0 + span)]))
    return EngineDes(rate=rate, ttft_mean=float(ttft.mean()), ttft_p=_percentile(ttft, q),
                     ttft_p50=float(np.median(ttft)), tpot_mean=float(tpot.mean()), tpot_p=_percentile(tpot, q),
                     tpot_p50=float(np.median(tpot)), occupancy=occ_area / span, tokens_per_s=tokens_out / span,
                     iteration_mean=it_time_sum / max(it_count, 1), gate_iters=float(np.mean(gaps)) if gaps else 1.0,
                     busiest_prompt_tokens=float(np.mean(big_tokens)) if big_tokens else 0.0,
                     slot_wait_share=float(slot_wait[sel].mean()) if sel.any() else float('nan'), budget_spill_share=n_spill / max(n_adm_iters, 1),
                     blocked=bool(blocked), n_requests=int(sel.sum()), wall_s=time.perf_counter() - t0,
                     e2e_mean=float(e2e.mean()) if len(e2e) else float("inf"),
                     e2e_p=_percentile(e2e, q) if len(e2e) else float("inf"),
                     e2e_p50=float(np.median(e2e)) if len(e2e) else float("inf"),
                     decode_batch=dec_area / span, decode_rows=rows_sum / max(it_count, 1))


DISPATCH_SIM_POLICIES = ("random", "fewest_requests", "fewest_tokens")
"""``simulate_dispatch``'s policies: a uniformly random instance, the one with the fewest requests in
flight (``instance_dispatch`` "load_balancing"), the one with the fewest prompt tokens waiting
("fewest_tokens")."""


def simulate_dispatch(policy: str, arrivals: np.ndarray, isl: np.ndarray, instances: int, rate: float,
                      iteration_s: float = 0.0, decode_s: float = 0.0, rng=None) -> np.ndarray:
    """TTFT of every request when a front end hands ``arrivals`` (times, s) with prompts of ``isl``
    tokens to ``instances`` instances by ``policy`` (``DISPATCH_SIM_POLICIES``): each instance
    prefills its prompts first come, first served at ``rate`` prompt tokens per second (a fluid
    server: a chunked budget over its iteration, work-conserving), a request's TTFT is its wait,
    its own prefill and ``iteration_s`` for its first token, and it stays in flight ``decode_s``
    after (what "fewest_requests" counts). The queueing discipline alone, no step costs: the oracle
    of ``scheduler.pooled_backlog`` (tests/test_instance_dispatch.py) and
    benchmarks/prefill_dispatch.py. ``rng`` draws the random instances."""
    if policy not in DISPATCH_SIM_POLICIES:
        raise ValueError(f"policy must be one of {', '.join(DISPATCH_SIM_POLICIES)} (got {policy!r})")
    rng = np.random.default_rng() if rng is None else rng
    free_at = np.zeros(instances)                      # when each instance's pending prefill ends
    leaving = [[] for _ in range(instances)]           # heaps of the in-flight requests' end times
    ttft = np.empty(len(arrivals))
    for i, t in enumerate(arrivals):
        if policy == "random":
            k = int(rng.integers(instances))
        elif policy == "fewest_requests":
            for h in leaving:
                while h and h[0] <= t:
                    heapq.heappop(h)
            k = int(np.argmin([len(h) for h in leaving]))
        else:
            k = int(np.argmin(np.maximum(free_at - t, 0.0)))
        done = max(t, free_at[k]) + isl[i] / rate
        free_at[k] = done
        heapq.heappush(leaving[k], done + decode_s)
        ttft[i] = done - t + iteration_s
    return ttft
