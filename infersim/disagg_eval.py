"""Disaggregated serving as deployed: integer prefill and decode worker pools, each with its own layout.

Decode workers (the search grid's layout × batch) run decode-only steps, so TPOT is the bare step
time, and each serves r_d = B·L/(OSL·t_d) requests/s. Prefill workers have their own layout,
searched over every candidate independently of the decode grid (and of the CLI-fixed decode
layout). A prefill worker batches prompt chunks of ``prefill_chunk_tokens``; it is an M/G/1 queue
with service rate μ requests/s, and its p99 TTFT (queue wait + own prefill + exposed KV transfer
+ the first decode step) must meet the limit, which caps its utilization at ρ_max and its rate at
c_p = μ·ρ_max. On N accelerators the system runs P prefill workers of s_p GPUs and D decode
workers of s_d GPUs, P·s_p + D·s_d ≤ N, integers, serving min(D·r_d, P·c_p) requests/s: the
rate-matching formula of TensorRT-LLM's disaggregation blog (effects.md section 2) with whole
workers. The KV cache moves from prefill to decode over the scale-up fabric when both pools fit
in one scale-up domain (the system may then leave the rest idle), else over the scale-out NICs;
the better of the two deployments is taken.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from . import parallel
from .engine import step_cost
from .graph import Shape
from .plan import Plan
from .serving import ServingResult, WorkloadStats, _prefill, decode_drift, decode_slope, prefix_hit, tpot_spread

RHO_GRID = np.linspace(0.01, 0.99, 99)
"""Prefill-worker utilizations tried (the admissible maximum is the largest meeting TTFT)."""
D_WINDOW = np.arange(-64, 2)
"""Decode-worker counts tried around the continuous optimum ⌊D*⌋ (each with the most prefill workers
the rest of the accelerators hold); trimmed to the reach the worker sizes allow."""


def kv_transfer_time(plan: Plan, isl, prefill_size, accelerators: int, inside: bool | None = None):
    """Seconds to move one prompt's KV cache from its prefill worker to a decode worker.

    Notes
    -----
    bytes = KV bytes of ISL tokens (whole model); the prefill worker's ranks send in parallel over
    the scale-up fabric when both pools sit in one domain (``inside``; default: the system fits
    one domain), else over the scale-out NICs.
    """
    hw = plan.hardware
    total = plan.model.kv_cache_bytes(isl, plan.formats.kv_cache)
    inside = accelerators <= hw.scale_up.domain_size if inside is None else inside
    bw = hw.scale_up.bandwidth if inside else hw.scale_out.bandwidth
    latency = (hw.scale_up.latency_us if inside else hw.scale_out.latency_us) * 1e-6
    return total / (prefill_size * bw * hw.efficiency.comm_fraction) + latency


def _waits(rho, s_mean, s_sq, percentile: float, arrival_scv: float = 1.0):
    """(mean, p-quantile) queue wait of a G/G/1 queue at utilization ρ: the Pollaczek-Khinchine
    mean of M/G/1, ρ·E[S]·(1 + c_s²)/(2(1 − ρ)), with 1 + c_s² replaced by c_a² + c_s² for renewal
    arrivals of squared coefficient of variation c_a² (the Allen-Cunneen approximation; exact for
    c_a² = 1); exponential tail P(W > w) ≈ ρ·exp(−ρ·w/E[W]) for the quantile."""
    w_mean = rho * s_sq / (2 * s_mean * (1 - rho))
    if arrival_scv != 1.0:
        cs2 = np.maximum(s_sq / np.maximum(s_mean * s_mean, 1e-300) - 1.0, 0.0)
        w_mean = w_mean * (arrival_scv + cs2) / (1.0 + cs2)
    tail = 1.0 - percentile / 100.0
    w_p = np.where(rho > tail, w_mean / np.maximum(rho, 1e-30) * np.log(np.maximum(rho / tail, 1.0)), 0.0)
    return w_mean, w_p


@dataclass
class PrefillPool:
    """Prefill candidates (1-D over options): layout, size, service moments, fixed TTFT parts."""

    layouts: dict[str, np.ndarray]
    size: np.ndarray
    mu: np.ndarray
    """Requests/s of one worker at full utilization."""
    s_mean: np.ndarray
    s_sq: np.ndarray
    t_alone: np.ndarray
    """Prefill time of one mean prompt alone."""
    t_fixed_p: np.ndarray
    """TTFT part besides queueing at the tail: tail prompt's prefill + exposed KV transfer."""
    kv: np.ndarray
    wait_p: np.ndarray | None = None
    """p-quantile wait on RHO_GRID, [options, rho] (``prefill_pool``'s options only: the search's)."""


_POOLS: list = []
"""The last few ``prefill_pool`` results with what they were built from (``POOL_MEMO`` entries)."""
POOL_MEMO = 4
"""Prefill pools kept: ``api.refine_best`` evaluates one decode layout at a few batches, each with
the same plan but for the decode layout and batch it pins, so the same pool each time."""


def prefill_pool(plan: Plan, stats: WorkloadStats, accelerators: int, percentile: float, inside: bool) -> PrefillPool:
    """``_prefill_pool``, reused while the plan's parts (the very objects), its search space but for
    the decode layout and batch a search pins, the workload and the arguments stay the same."""
    parts = tuple(getattr(plan, f.name) for f in fields(plan) if f.name != "search") + (stats,)
    args = (replace(plan.search, batch=(), tp=(), pp=(), ep=(), dp=()), accelerators, percentile, inside)
    for held, same, pool in _POOLS:
        if same == args and all(a is b for a, b in zip(held, parts)):
            return pool
    pool = _prefill_pool(plan, stats, accelerators, percentile, inside)
    _POOLS.insert(0, (parts, args, pool))  # holds the parts, so no other object takes their ids
    del _POOLS[POOL_MEMO:]
    return pool


def _prefill_pool(plan: Plan, stats: WorkloadStats, accelerators: int, percentile: float, inside: bool) -> PrefillPool:
    """Every prefill layout the system allows (the pool's own search space), reduced per worker
    size to those not beaten on both TTFT and rate by another layout of that size."""
    layouts = parallel.candidate_layouts(plan, accelerators, fixed=False)
    if plan.serving.prefill_tp:  # a pinned prefill worker size
        keep = (layouts["tp"] * layouts["pp"]) == plan.serving.prefill_tp
        layouts = {k: v[keep] for k, v in layouts.items()}
    pool, ok = prefill_options(plan, stats, layouts, accelerators, inside)
    size, mu, t_fixed = pool.size, pool.mu, pool.t_fixed_p
    keep = []
    for i in np.flatnonzero(ok):  # candidate layouts (not grid points): Pareto per worker size
        same = ok & (size == size[i])
        beaten = same & (t_fixed <= t_fixed[i]) & (mu >= mu[i]) & ((t_fixed < t_fixed[i]) | (mu > mu[i]))
        if not np.any(beaten):
            keep.append(i)
    k = np.array(keep, dtype=int)
    _, wait_p = _waits(RHO_GRID[None, :], pool.s_mean[k, None], pool.s_sq[k, None], percentile, stats.arrival_scv)
    return PrefillPool({name: v[k] for name, v in pool.layouts.items()}, size[k], mu[k], pool.s_mean[k],
                       pool.s_sq[k], pool.t_alone[k], t_fixed[k], pool.kv[k], np.maximum.accumulate(wait_p, axis=1))


def prefill_options(plan: Plan, stats: WorkloadStats, layouts: dict[str, np.ndarray], accelerators: int,
                    inside: bool) -> tuple[PrefillPool, np.ndarray]:
    """(A prefill worker per layout in ``layouts`` (1-D arrays tp, pp, ep, dp), without the wait table,
    the mask of those that fit: divisibility, memory for a chunk's KV, a finite positive rate)."""
    lay = parallel.layout_axis(layouts)
    size = (lay.tp * lay.pp)[:, 0]
    plen, plen_sq = _prefill(stats, prefix_hit(plan, accelerators / size))
    chunk = plan.serving.prefill_chunk_tokens
    n_chunk = np.maximum(chunk / plen, 1.0)
    t_chunk = step_cost(plan, lay, Shape(prefill_seqs=n_chunk[:, None], prefill_len=plen[:, None],
                                         prefill_len_sq=plen_sq[:, None], prefill_patches=stats.vision_patches,
                        prefill_patches_sq=stats.vision_patches_sq)).total[:, 0]
    t_alone = step_cost(plan, lay, Shape(prefill_seqs=1.0, prefill_len=plen[:, None], prefill_len_sq=plen_sq[:, None],
                                         prefill_patches=stats.vision_patches,
                        prefill_patches_sq=stats.vision_patches_sq)).total[:, 0]
    mu = n_chunk / t_chunk
    s_mean = 1.0 / mu
    s_sq = s_mean**2 * plen_sq / np.maximum(plen**2, 1e-30)
    isl_tail = np.sqrt(stats.isl_sq) / max(stats.isl_mean, 1e-9)
    kv = kv_transfer_time(plan, plen, size, accelerators, inside) * plan.serving.kv_transfer_exposed
    t_fixed = t_alone * isl_tail + kv
    ok = parallel.layout_feasibility(plan.model, lay, accelerators, parallel.redundant_slots(plan))[0][:, 0]
    ok &= (parallel.kv_budget_per_device(plan, lay, chunk)[:, 0] > 0) & np.isfinite(mu) & (mu > 0)
    return PrefillPool(dict(layouts), size, mu, s_mean, s_sq, t_alone, t_fixed, kv), ok


class DisaggChoice:
    """Per decode point: which prefill option (of which tier's pool) and how many workers of each."""

    def __init__(self, shape):
        self.pools: list[tuple[PrefillPool, bool]] = []
        self.pool_index = np.zeros(shape, dtype=int)
        self.option = np.zeros(shape, dtype=int)
        self.prefill_workers = self.decode_workers = self.decode_size = None
        self.split_fits = np.ones(shape, dtype=bool)
        """Where pinned worker counts (``Serving.prefill_workers`` / ``decode_workers``) fit."""

    def take(self, name: str) -> np.ndarray:
        """A PrefillPool field (e.g. ``mu``, ``size``) at each point's chosen option."""
        out = np.zeros(self.option.shape)
        for k, (pool, _) in enumerate(self.pools):
            vals = getattr(pool, name)
            if len(vals):
                out = np.where(self.pool_index == k, vals[np.minimum(self.option, len(vals) - 1)], out)
        return out

    def config(self, i: int, j: int, accelerators: int) -> dict:
        """The disaggregated deployment at grid point (i, j), for the prediction's ``config``."""
        pool, inside = self.pools[int(self.pool_index[i, j])]
        o = int(self.option[i, j])
        p, d = int(self.prefill_workers[i, j]), int(self.decode_workers[i, j])
        sp, sd = int(pool.size[o]), int(self.decode_size[i, j])
        return {"prefill_workers": p, "decode_workers": d, "replicas": d,
                "prefill_layout": {k: int(v[o]) for k, v in pool.layouts.items()},
                "prefill_accelerators": p * sp, "decode_accelerators": d * sd,
                "idle_accelerators": accelerators - p * sp - d * sd,
                "kv_transfer_tier": "scale-up" if inside else "scale-out"}


def _split(pool: PrefillPool, r_d, s_d, t_d, limit, n: int, domain: int = 1, pinned: tuple[int, int] = (0, 0)):
    """Best integer split per decode point (1-D arrays r_d, s_d, t_d over the points).

    Per prefill option the admissible rate c_p = μ·ρ_max follows from the TTFT budget left after
    the first decode step; per prefill worker size the option of the highest c_p goes to the
    integer split: D decode workers near the continuous optimum D* = N·c_p/(r_d·s_p + c_p·s_d),
    each with the most prefill workers P the rest holds without a worker straddling a scale-up
    domain of ``domain`` accelerators (``parallel.packed_second_pool``; ⌊(N − D·s_d)/s_p⌋ for
    ``domain`` 1), served rate min(D·r_d, P·c_p). Returns (rate, P, D, option index).
    tests/test_parallel.py checks it against exhaustive enumeration. ``pinned`` (P₀, D₀): worker
    counts a deployment fixes (0: free); with D₀ the prefill workers are the most that fit beside it
    (exactly P₀ where both are pinned, none where P₀ does not fit), with P₀ alone the decode workers
    are the most that fit beside it.
    """
    q = len(pool.size)
    shape = np.broadcast(r_d, t_d).shape
    if q == 0 or int(np.prod(shape)) == 0:
        zero = np.zeros(shape)
        return zero, zero, zero, np.zeros(shape, dtype=int)
    budget = limit - t_d  # [L, B]
    # admissible utilization per option: the largest grid ρ whose p-quantile wait fits the budget
    c = np.empty(shape + (q,))
    for j in range(q):  # prefill options (a handful of layouts), each over the whole decode grid
        idx = np.searchsorted(pool.wait_p[j], budget - pool.t_fixed_p[j], side="right") - 1
        c[..., j] = np.where(idx >= 0, pool.mu[j] * RHO_GRID[np.maximum(idx, 0)], 0.0)
    sp, rd, sd = pool.size, np.asarray(r_d)[..., None], np.asarray(s_d, dtype=float)[..., None]
    # per prefill worker size the option of the highest admissible rate: the integer split's served
    # rate min(D·r_d, P·c_p) depends on the option only through c_p once the size is fixed, so the
    # best option of each size is exact (a short list by continuous rate matching is not: on 64 H200
    # it held only 16-GPU prefill workers, 12 decode workers beside one where an 8-GPU one leaves 14)
    sizes = np.unique(sp)
    top = np.stack([np.argmax(np.where(sp == s, c, -1.0), axis=-1) for s in sizes], axis=-1)  # [L, B, k]
    c_top = np.take_along_axis(c, top, axis=-1)[..., None]
    sp_top = sp[top][..., None]
    rd4, sd4 = rd[..., None], sd[..., None]
    d_star = np.where(c_top > 0, n * c_top / (rd4 * sp_top + c_top * sd4), 0.0)
    # the optimum's D lies within ⌈s_p/s_d⌉ + 1 below ⌊D*⌋ (rounding P down frees at most s_p GPUs)
    # (and, packed into domains, by at most one worker per domain)
    reach = np.ceil(np.max(sp_top, initial=1.0) / max(float(np.min(sd, initial=1.0)), 1.0)) + 2
    reach = int(min(reach + (np.ceil(n / domain) if domain > 1 else 0), -D_WINDOW[0]))
    window = D_WINDOW[D_WINDOW >= -reach]
    p0, d0 = (int(v) for v in pinned)
    if p0 and not d0:  # the prefill pool placed first, the decode pool the most that fit beside it
        window = np.zeros(1)
        pp = np.broadcast_to(float(p0), np.broadcast(d_star, sd4).shape)
        dd = (parallel.packed_second_pool(n, domain, pp, sp_top, sd4) if domain > 1
              else np.floor((n - pp * sp_top) / sd4))
    else:
        if d0:
            window = np.zeros(1)
        dd = (np.zeros_like(d_star) + d0 if d0 else np.floor(d_star)) + window
        pp = (parallel.packed_second_pool(n, domain, dd, sd4, sp_top) if domain > 1
              else np.floor((n - dd * sd4) / sp_top))
        if p0:  # both pinned: exactly P₀ prefill workers where they fit
            pp = np.where(pp >= p0, float(p0), 0.0)
    good = (dd >= 1) & (pp >= 1) & (c_top > 0)
    value = np.where(good, np.minimum(dd * rd4, pp * c_top), 0.0)  # [L, B, k, W]
    flat = value.reshape(shape + (-1,))
    best = np.argmax(flat, axis=-1)
    pick = lambda a: np.take_along_axis(np.broadcast_to(a, value.shape).reshape(shape + (-1,)), best[..., None], -1)[..., 0]  # noqa: E731
    opt = np.take_along_axis(top, (best // len(window))[..., None], -1)[..., 0]
    return pick(value), pick(pp), pick(dd), opt


def decode_step(plan: Plan, layout, stats: WorkloadStats, batch):
    """(shape, StepCost, seconds per iteration) of a decode worker's decode-only step at occupancy
    ``batch``: the step plus a Python executor's responses (``Engine.host_time``), as aggregated."""
    decode = Shape(decode_seqs=batch, decode_q=1.0 + plan.serving.draft_depth, decode_ctx=stats.context_mean)
    cost = step_cost(plan, layout, decode)
    return decode, cost, cost.total + plan.engine.host_time(batch)


def tpot_quantile(plan: Plan, layout, stats: WorkloadStats, decode: Shape, batch, t_d, q: float):
    """A decode worker's q-quantile of per-request TPOT: the mean t_d/L, with the acceptance spread
    (``serving.tpot_spread``, MTP) and the decode count's drift over a request's window
    (``serving.decode_drift``) in quadrature; a decode worker has no prompt stalls, so no fast noise."""
    L = plan.serving.tokens_per_step
    tail = tpot_spread(plan, q)
    slope = decode_slope(plan, layout, decode, batch, t_d, plan.engine.host_time)
    a_s, z_s, _ = decode_drift(slope, batch, t_d, L, stats, q)
    return t_d / L + np.sqrt((t_d / L * (tail - 1.0)) ** 2 + (a_s * z_s) ** 2)


def evaluate(plan: Plan, scenario, accelerators: int, stats: WorkloadStats, layouts: dict, batch, live=None):
    """System output tokens/s of a disaggregated deployment over the decode [layout, batch] grid.

    ``live``: mask of the decode points worth sizing pools for (layout and memory feasible); the
    TPOT limit is applied here too, so the integer split runs only where it can matter.
    Returns (ServingResult of the decode worker, ok mask of the prefill side, system tokens/s,
    DisaggChoice with the worker counts and the prefill layout per point).
    """
    lay = parallel.layout_axis(layouts)
    L = plan.serving.tokens_per_step
    decode, cost, t_d = decode_step(plan, lay, stats, batch)
    r_d = batch * L / (stats.osl_mean * t_d)
    s_d = lay.tp * lay.pp
    slo = scenario.slo
    # the TTFT budget honours every limit that TTFT enters: p99 TTFT, and p99 end-to-end less the
    # longest requests' decode (e2e = TTFT + OSL_p99·TPOT for decode-only workers)
    limit = np.full(np.shape(t_d), (slo.ttft_ms if slo.ttft_ms is not None else 1e12) * 1e-3)
    if slo.e2e_ms is not None:
        limit = np.minimum(limit, slo.e2e_ms * 1e-3 - stats.osl_p99 * t_d / L)
    hw = plan.hardware
    domain = hw.scale_up.domain_size
    tiers = [(accelerators, accelerators <= domain)]
    if accelerators > domain:  # both pools inside one domain, the rest idle
        tiers.append((domain, True))
    shape = np.broadcast(r_d, t_d).shape
    live = np.ones(shape, dtype=bool) if live is None else np.broadcast_to(live, shape).copy()
    tpot_q = tpot_quantile(plan, lay, stats, decode, batch, t_d, slo.percentile / 100.0)
    if slo.tpot_ms is not None:
        live &= tpot_q <= slo.tpot_ms * 1e-3
    idx = np.nonzero(live)
    flat = lambda a: np.broadcast_to(a, shape)[idx]  # noqa: E731  (live points as a 1-D axis)
    choice = DisaggChoice(shape)
    value, pw, dw = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    for k, (n, inside) in enumerate(tiers):
        pool = prefill_pool(plan, stats, n, slo.percentile, inside)
        v, p_k, d_k, opt = _split(pool, flat(r_d), flat(s_d), flat(t_d), flat(limit), n, domain,
                                  (plan.serving.prefill_workers, plan.serving.decode_workers))
        better = v > value[idx]
        for arr, new_vals in ((value, v), (pw, p_k), (dw, d_k), (choice.option, opt)):
            arr[idx] = np.where(better, new_vals, arr[idx])
        choice.pool_index[idx] = np.where(better, k, choice.pool_index[idx])
        choice.pools.append((pool, inside))
    ok = value > 0
    # the queue at the chosen split: served rate V over P workers of rate μ
    mu = choice.take("mu")
    rho = np.where(ok, value / np.maximum(pw * mu, 1e-30), 0.5)
    w_mean, w_p = _waits(rho, choice.take("s_mean"), choice.take("s_sq"), slo.percentile, stats.arrival_scv)
    ttft_p99 = np.where(ok, w_p + choice.take("t_fixed_p") + t_d, np.inf)
    ttft_mean = np.where(ok, w_mean + choice.take("t_alone") + choice.take("kv") + t_d, np.inf)
    tpot = t_d / L
    system = value * stats.osl_mean
    used = np.maximum(pw * choice.take("size") + dw * s_d, 1.0)
    # per decode-instance share of the system (tokens/s over the instance's size = per used accelerator)
    res = ServingResult(tokens_per_s=system * s_d / used, rate=value, ttft_mean=ttft_mean, ttft_p99=ttft_p99,
                        tpot_mean=tpot, tpot_p99=np.broadcast_to(tpot_q, np.shape(tpot)),
                        e2e_p99=ttft_p99 + stats.osl_p99 * tpot, step=cost,
                        prefill_share=np.zeros_like(t_d), shape=decode)
    choice.prefill_workers, choice.decode_workers = pw, dw
    choice.decode_size = np.broadcast_to(s_d, value.shape)
    # pinned worker counts (plan.serving) that cannot sit on the accelerators with this decode layout
    sv = plan.serving
    need = sv.decode_workers * s_d + sv.prefill_workers * max(sv.prefill_tp, 1)
    # and a pinned prefill worker size that no prefill layout takes (heads, memory)
    sized = not sv.prefill_tp or any(len(pool.size) for pool, _ in choice.pools)
    choice.split_fits = np.broadcast_to((need <= accelerators) & sized, value.shape)
    return res, ok, system, choice
