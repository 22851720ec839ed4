"""A disaggregated deployment at a given load: fixed prefill and decode pools run at ``qps``.

The capacity search (``disagg_eval``) sizes the pools for the largest rate meeting the limits; here
the pools are given (the capacity-best split, or the split a submitter deployed) and the arrival
rate λ is. The same first-order models, so that at the capacity's own rate this reproduces the
search's figures (tests/test_disagg_load.py):

- decode workers (D of them, one layout) run decode-only steps; each takes λ/D requests/s and holds
  the occupancy B where its service rate B·L/(OSL·t_d(B)) equals them (Little's law; t_d the decode
  step with its host time, L tokens per step). Mean TPOT t_d(B)/L, the p99 with the acceptance
  spread and the decode count's drift (``serving.decode_drift``), as the capacity search prices it.
  A rate above B_max·L/(OSL·t_d(B_max)) (B_max the batch cap or the KV capacity) saturates them;
- prefill workers (P of them, one layout, prompt chunks of ``prefill_chunk_tokens``) are P parallel
  M/G/1 queues at utilization ρ = λ/(P·μ), μ a worker's requests/s at full chunks; TTFT = queue wait
  + own prefill + exposed KV transfer + the first decode step (``disagg_eval._waits``). ρ ≥ 1
  saturates them.
"""

from __future__ import annotations

import numpy as np

from .disagg_eval import _waits, decode_step, prefill_options, tpot_quantile
from .graph import Layout
from .plan import Plan
from .serving import WorkloadStats, tpot_spread

BATCH_POINTS = 512
"""Decode occupancies tried per worker (geometric, 1e-3 … B_max) before the crossing is refined."""


def decode_tpot(plan: Plan, layout: Layout, stats: WorkloadStats, batch):
    """Mean time per output token of a decode worker at occupancy ``batch``: t_d(B)/L."""
    return decode_step(plan, layout, stats, batch)[2] / plan.serving.tokens_per_step


def decode_occupancy(plan: Plan, layout: Layout, stats: WorkloadStats, rate: float, b_max: float):
    """Occupancy of one decode worker serving ``rate`` requests/s: the smallest B ≤ ``b_max`` with
    B·L/(OSL·t_d(B)) = rate (linear between grid points, then the step priced there), or None when
    even B_max serves less."""
    L = plan.serving.tokens_per_step
    grid = np.geomspace(1e-3, max(float(b_max), 2e-3), BATCH_POINTS)
    t = decode_step(plan, layout, stats, grid)[2]
    served = grid * L / (stats.osl_mean * np.asarray(t, dtype=float).ravel())
    above = np.flatnonzero(served >= rate)
    if rate <= 0 or not len(above):
        return None
    k = int(above[0])
    if k == 0:
        return float(grid[0] * rate / served[0])
    lo, hi = grid[k - 1], grid[k]
    return float(lo + (hi - lo) * (rate - served[k - 1]) / (served[k] - served[k - 1]))


def operating_point(plan: Plan, decode_layout: Layout, decode_workers: int, prefill_layout: Layout,
                    prefill_workers: int, stats: WorkloadStats, scenario, qps: float, b_max: float,
                    accelerators: int, samples: float | None = None, inside: bool | None = None):
    """(meets every limit, the first broken limit's reason name or '', metrics) of the deployment at
    ``qps`` requests/s; the metrics carry the keys of ``scheduler.operating_point`` (NaN where a pool
    saturates) plus ``prefill_utilization``. ``b_max``: a decode worker's occupancy cap (its batch
    cap or KV capacity, whichever is lower); ``inside``: the KV cache moves over the scale-up fabric
    (default: the system fits one scale-up domain)."""
    from .scheduler import broken_limit, loadgen_rates

    slo = scenario.slo
    q = slo.percentile / 100.0
    L = plan.serving.tokens_per_step
    inside = accelerators <= plan.hardware.scale_up.domain_size if inside is None else inside
    cap = plan.engine.max_batch_size
    d = float(np.asarray(decode_layout.dp))
    limit = min(float(b_max), cap * d) if cap is not None else float(b_max)
    nan = float("nan")
    m = {"requests_per_s": qps, "tokens_per_s": qps * stats.osl_mean, "gate_iters": 0.0, "prefill_share": 0.0}
    b = decode_occupancy(plan, decode_layout, stats, qps / decode_workers, limit)
    lay1 = {k: np.array([int(np.asarray(getattr(prefill_layout, k)))]) for k in ("tp", "pp", "ep", "dp")}
    pool, fits = prefill_options(plan, stats, lay1, accelerators, inside)
    rho = qps / (prefill_workers * float(pool.mu[0])) if bool(fits[0]) else float("inf")
    m["prefill_utilization"] = rho
    why = ""
    if b is None:
        why = "BATCH_LIMIT" if cap is not None and cap * d <= float(b_max) else "SATURATED"
    elif not rho < 1.0:
        why = "SATURATED"
    if why:
        m.update({k: nan for k in ("occupancy", "occupancy_per_instance", "occupancy_per_rank", "iteration_s",
                                   "decode_iteration_s", "ttft_p50_s", "ttft_s", "ttft_mean_s", "tpot_p50_s", "tpot_s",
                                   "tpot_mean_s")})
        return False, why, loadgen_rates(m, stats, qps, samples)
    shape, _, t_d = decode_step(plan, decode_layout, stats, b)
    t_d = float(np.ravel(t_d)[0])
    tpot_mean = t_d / L
    tpot_p99 = float(np.ravel(tpot_quantile(plan, decode_layout, stats, shape, b, t_d, q))[0])
    w_mean, w_p = _waits(rho, pool.s_mean[0], pool.s_sq[0], slo.percentile, stats.arrival_scv)
    _, w_50 = _waits(rho, pool.s_mean[0], pool.s_sq[0], 50.0, stats.arrival_scv)
    first = float(pool.t_alone[0] + pool.kv[0]) + t_d
    ttft_mean = float(w_mean) + first
    ttft_p99 = float(w_p + pool.t_fixed_p[0]) + t_d
    m.update(occupancy=b * decode_workers, occupancy_per_instance=b, occupancy_per_rank=b / d, iteration_s=t_d,
             decode_iteration_s=t_d, ttft_p50_s=float(w_50) + first, ttft_s=ttft_p99, ttft_mean_s=ttft_mean,
             tpot_p50_s=tpot_mean * tpot_spread(plan, 0.5), tpot_s=tpot_p99, tpot_mean_s=tpot_mean)
    loadgen_rates(m, stats, qps, samples)
    why = broken_limit(slo, ttft_p99, tpot_p99, ttft_p99 + stats.osl_p99 * tpot_mean)
    return why == "", why, m


def deployment(config: dict) -> tuple[Layout, int, Layout, int]:
    """(decode layout, decode workers, prefill layout, prefill workers) of a disaggregated config
    (``Prediction.config`` of a disaggregated point)."""
    dec = Layout(**{k: int(config[k]) for k in ("tp", "pp", "ep", "dp")})
    pre = Layout(**{k: int(config["prefill_layout"][k]) for k in ("tp", "pp", "ep", "dp")})
    return dec, int(config["decode_workers"]), pre, int(config["prefill_workers"])


__all__ = ["operating_point", "decode_occupancy", "decode_tpot", "deployment", "BATCH_POINTS"]
