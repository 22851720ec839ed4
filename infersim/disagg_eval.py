"""Disaggregated serving: a decode pool and a prefill pool sized by rate matching.

Decode instances run decode-only steps, so TPOT is the bare step time. Prefill instances run
prompt chunks of ``prefill_chunk_tokens``; each is an M/G/1 queue whose utilization ρ is the
highest that keeps p99 TTFT (queue wait + own prefill + exposed KV transfer + first decode step)
under the limit. Prefill accelerators needed per request/s are g_p/(μ·ρ), so per-accelerator
output is r_d·OSL / (g_d + r_d·g_p/(μ·ρ)) for a decode instance serving r_d requests/s
(the rate-matching formula of TensorRT-LLM's disaggregation blog, effects.md section 2, with the
pool ratio continuous rather than integer).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from . import parallel
from .engine import step_cost
from .graph import Shape
from .plan import Plan
from .serving import ServingResult, WorkloadStats, _prefill, prefix_hit

RHO_GRID = np.linspace(0.05, 0.95, 19)


def kv_transfer_time(plan: Plan, isl, prefill_size, accelerators: int):
    """Seconds to move one prompt's KV cache from its prefill instance to a decode instance.

    Notes
    -----
    bytes = KV bytes of ISL tokens (whole model); the prefill instance's ranks send in parallel
    over the scale-up fabric when the system fits one domain, else over the scale-out NICs.
    """
    hw = plan.hardware
    total = plan.model.kv_cache_bytes(isl, plan.formats.kv_cache)
    inside = accelerators <= hw.scale_up.domain_size
    bw = hw.scale_up.bandwidth if inside else hw.scale_out.bandwidth
    latency = (hw.scale_up.latency_us if inside else hw.scale_out.latency_us) * 1e-6
    return total / (prefill_size * bw * hw.efficiency.comm_fraction) + latency


def prefill_options(plan: Plan, layouts: dict, stats: WorkloadStats, accelerators: int, percentile: float):
    """Flattened prefill options: (p99 TTFT excluding the first decode step, accelerator-seconds per
    request = g_p/(μ·ρ), option index) for every prefill layout × utilization."""
    lay = parallel.layout_axis(layouts)
    size = lay.tp * lay.pp
    workers = accelerators / size
    plen, plen_sq = _prefill(stats, prefix_hit(plan, workers))
    chunk = plan.serving.prefill_chunk_tokens
    n_chunk = np.maximum(chunk / plen, 1.0)
    t_chunk = step_cost(plan, lay, Shape(prefill_seqs=n_chunk, prefill_len=plen, prefill_len_sq=plen_sq,
                                             prefill_patches=stats.vision_patches)).total
    t_alone = step_cost(plan, lay, Shape(prefill_seqs=1.0, prefill_len=plen, prefill_len_sq=plen_sq,
                                             prefill_patches=stats.vision_patches)).total
    mu = n_chunk / t_chunk                       # requests/s at full utilization
    s_mean = 1.0 / mu
    s_sq = s_mean**2 * plen_sq / np.maximum(plen**2, 1e-30)
    rho = RHO_GRID[None, :]
    w_mean = rho * s_sq / (2 * s_mean * (1 - rho))   # Pollaczek-Khinchine
    tail = 1.0 - percentile / 100.0
    w_p = np.where(rho > tail, w_mean / rho * np.log(rho / tail), 0.0)  # exponential-tail approximation
    isl_tail = np.sqrt(stats.isl_sq) / max(stats.isl_mean, 1e-9)
    kv = kv_transfer_time(plan, plen, size, accelerators) * plan.serving.kv_transfer_exposed
    ttft = w_p + t_alone * isl_tail + kv
    ok = parallel.layout_feasibility(plan.model, lay, accelerators)[0]
    ok = ok & (parallel.kv_budget_per_device(plan, lay, chunk) > 0) & (size <= accelerators)
    cost = np.where(ok, size / (mu * rho), np.inf)
    ttft = np.where(ok, ttft, np.inf)
    return ttft.ravel(), cost.ravel()


def evaluate(plan: Plan, scenario, accelerators: int, stats: WorkloadStats, layouts: dict, batch):
    """Per-accelerator throughput of a disaggregated system over the decode [layout, batch] grid.

    Returns (ServingResult, ok mask of the prefill side, per-accelerator tokens/s, extra arrays).
    """
    lay = parallel.layout_axis(layouts)
    L = plan.serving.tokens_per_step
    dq = 1.0 + plan.serving.draft_depth
    decode = Shape(decode_seqs=batch, decode_q=dq, decode_ctx=stats.context_mean)
    cost = step_cost(plan, lay, decode)
    t_d = cost.total
    r_d = batch * L / (stats.osl_mean * t_d)
    slo = scenario.slo
    limit = (slo.ttft_ms if slo.ttft_ms is not None else 1e12) * 1e-3
    # the prefill pool has its own layout, searched over everything the hardware allows whatever
    # the decode pool's layout is fixed to (so a point alone equals the same point in a grid)
    free = replace(plan, search=replace(plan.search, tp=None, pp=None, ep=None, dp=None, batch=None))
    p_ttft, p_cost = prefill_options(plan, parallel.candidate_layouts(free, accelerators), stats, accelerators,
                                     slo.percentile)
    order = np.argsort(p_ttft)
    sorted_ttft = p_ttft[order]
    best_cost = np.minimum.accumulate(p_cost[order])
    budget = limit - t_d
    k = np.searchsorted(sorted_ttft, budget, side="right") - 1
    prefill_ok = k >= 0
    c_p = np.where(prefill_ok, best_cost[np.maximum(k, 0)], np.inf)
    ttft_p = np.where(prefill_ok, sorted_ttft[np.maximum(k, 0)], np.inf) + t_d
    size = lay.tp * lay.pp
    gpus = size + r_d * c_p
    per_acc = np.where(prefill_ok, r_d * stats.osl_mean / gpus, 0.0)
    tpot = t_d / L
    res = ServingResult(tokens_per_s=per_acc * size, rate=r_d, ttft_mean=ttft_p, ttft_p99=ttft_p,
                        tpot_mean=tpot, tpot_p99=tpot, e2e_p99=ttft_p + stats.osl_p99 * tpot, step=cost,
                        prefill_share=np.zeros_like(t_d), shape=decode)
    prefill_gpus_per_decode_instance = r_d * c_p
    return res, prefill_ok, per_acc, prefill_gpus_per_decode_instance
