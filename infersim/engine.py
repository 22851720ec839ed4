"""Step costing: the time of one engine step of one instance, with a breakdown.

Builds the stage's operator graph for a ``Shape`` and ``Layout`` (arrays), applies the plan's
graph passes, prices every op with the roofline or the collective model, and sums. Pipeline
parallelism processes pp micro-batches of 1/pp of the sequences through layers/pp per stage,
so a full step (every sequence advances once) takes pp stage times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import comm, roofline
from .graph import Layout, OpKind, Shape, build_graph
from .plan import Plan
from .units import MS

KINDS = ("gemm", "attention", "elementwise", "comm", "overhead")


@dataclass
class StepCost:
    """Time of one full engine step, seconds, with breakdowns (all arrays, broadcast).

    total: step time. by_kind: time per op kind (gemm, attention, elementwise, comm, overhead).
    compute_bound / memory_bound: compute-op time spent compute- or memory-bound.
    comm_exposed: communication time not hidden by overlap.
    """

    total: np.ndarray
    by_kind: dict[str, np.ndarray]
    compute_bound: np.ndarray
    memory_bound: np.ndarray
    comm_exposed: np.ndarray
    by_op: dict[str, np.ndarray] | None = None
    op_info: dict[str, tuple[str, str]] | None = None
    """Per op name: (kind, bound) where bound is compute, memory or communication."""


def moe_imbalance(plan: Plan, layout: Layout, tokens):
    """Max/mean expert-parallel load of a MoE layer (1 for dense models or ep = 1).

    Notes
    -----
    I = 1 + cv·(1 − e_eplb)·sqrt(2·ln ep)/sqrt(E/ep) + z·sqrt(ep/(T·k)): the expected maximum of
    ep per-rank loads, each a sum of E/ep experts whose popularity has coefficient of variation
    cv, with balancing removing a share e_eplb of the skew, plus token-sampling noise.
    Reference: shared/reference/effects.md section 4 (EPLB 2.54x decode at EP72; I ~ 1.18 at
    default balance in prefill).
    """
    moe = plan.model.moe
    if moe is None:
        return 1.0
    ep = np.asarray(layout.ep, dtype=float)
    experts_per_rank = moe.n_routed_experts / ep
    skew = plan.moe_popularity_cv * (1 - plan.eplb_efficiency) * np.sqrt(2 * np.log(np.maximum(ep, 1))) / np.sqrt(experts_per_rank)
    noise = plan.moe_imbalance_noise * np.sqrt(ep / np.maximum(tokens * moe.top_k, 1.0))
    return np.where(ep > 1, np.minimum(1.0 + skew + noise, ep), 1.0)  # the busiest rank holds at most all


def draft_graph(plan: Plan, layout: Layout, stage_shape: Shape, imbalance):
    """Drafting ops: ``draft_layers`` decoder layers (plus LM head per depth) on one token per
    sequence, the MTP module's sequential passes (DeepSeek-V3 MTP; EAGLE-style heads alike)."""
    from dataclasses import replace as _replace

    model = plan.model
    one = Shape(decode_seqs=stage_shape.decode_seqs, decode_q=1.0, decode_ctx=stage_shape.decode_ctx)
    g = build_graph(model, one, layout, plan.formats, moe_imbalance=imbalance, dispatch_bytes=plan.dispatch_bytes)
    per_layer = plan.serving.draft_layers / model.n_layers
    depth = max(plan.serving.draft_depth, 1)
    ops = []
    for op in g.ops:
        scale = depth / np.asarray(layout.pp, dtype=float) if op.block == "head" else per_layer
        ops.append(_replace(op, name="draft_" + op.name, count=op.count * scale))
    return g.__class__(tuple(ops), phase="draft")


def step_cost(plan: Plan, layout: Layout, shape: Shape, *, detail: bool = False) -> StepCost:
    """Cost of one engine step of one instance (all sequences advance once).

    Parameters
    ----------
    plan : Plan
    layout : Layout, arrays broadcastable with the shape arrays
    shape : Shape of the whole instance step (before micro-batching)
    detail : also return per-op times (for ``--explain``)
    """
    hw, model = plan.hardware, plan.model
    eff = hw.efficiency
    stage_shape = shape.scaled(1.0 / layout.pp)
    tokens_dev = stage_shape.new_tokens / layout.tp
    imbalance = moe_imbalance(plan, layout, stage_shape.new_tokens)
    graph = build_graph(model, stage_shape, layout, plan.formats, moe_imbalance=imbalance,
                        dispatch_bytes=plan.dispatch_bytes)
    if plan.serving.draft_layers > 0:
        graph = graph + draft_graph(plan, layout, stage_shape, imbalance)
    for _, graph_pass in plan.graph_passes:
        graph = graph_pass(graph)

    bandwidth = hw.memory.bandwidth
    c_eff = eff.compute_fraction * plan.kernel_efficiency
    a_eff = eff.attention_fraction * plan.kernel_efficiency
    launch = eff.launch_overhead_us * 1e-6 * plan.launch_scale
    if plan.graph_max_batch is not None and plan.launch_scale < 1.0:
        # steps with more sequences per rank than the largest captured graph run eagerly
        eager = stage_shape.decode_seqs / layout.dp > plan.graph_max_batch
        launch = np.where(eager, eff.launch_overhead_us * 1e-6, launch)
    by_kind = {k: 0.0 for k in KINDS}
    tc_sum = tm_sum = 0.0
    by_op = {} if detail else None
    op_info = {} if detail else None
    n_kernels = 0.0
    for op in graph.ops:
        if op.kind == OpKind.COMM:
            t = comm.collective_time(op.collective, op.bytes, op.group, hw)
            t = op.count * t
            by_kind["comm"] = by_kind["comm"] + t
            n_kernels = n_kernels + op.count * (np.asarray(op.group) > 1)
        else:
            flop_rate = hw.compute.flop_rate(op.precision)
            if op.kind == OpKind.GEMM:
                ce = roofline.gemm_efficiency(op.m, c_eff * (plan.moe_kernel_efficiency if op.name.startswith("experts") else 1.0),
                                              eff.gemm_m_half)
            elif op.kind == OpKind.ATTENTION:
                ce = a_eff
            else:
                ce = c_eff
            t1, tc, tm = roofline.op_time(op.flops, op.bytes, flop_rate, bandwidth, ce, getattr(eff, op.memory_efficiency))
            t = op.count * t1
            by_kind[op.kind.value] = by_kind[op.kind.value] + t
            tc_sum = tc_sum + op.count * np.where(tc >= tm, t1, 0.0)
            tm_sum = tm_sum + op.count * np.where(tc >= tm, 0.0, t1)
            # an op with no work (e.g. prefill attention in a decode-only step) is not launched
            n_kernels = n_kernels + op.count * ((np.asarray(op.flops) > 0) | (np.asarray(op.bytes) > 0))
        if detail:
            by_op[op.name] = by_op.get(op.name, 0.0) + t
            if op.kind == OpKind.COMM:
                bound = "communication"
            else:
                bound = "compute" if float(np.mean(tc >= tm)) >= 0.5 else "memory"
            op_info[op.name] = (op.kind.value, bound)
    compute = by_kind["gemm"] + by_kind["attention"] + by_kind["elementwise"]
    overlap_on = tokens_dev >= plan.overlap_min_tokens
    hidden = np.where(overlap_on, np.minimum(plan.comm_overlap * by_kind["comm"], compute), 0.0)
    comm_exposed = by_kind["comm"] - hidden
    stage = compute + comm_exposed + n_kernels * launch
    pp = layout.pp
    # each pipeline micro-batch is its own engine iteration with its own host overhead
    host = eff.step_overhead_ms * MS * plan.host_overhead_scale
    overhead = pp * (n_kernels * launch + host)
    total = pp * (stage + host)
    out = {k: np.asarray(v * pp) for k, v in by_kind.items()}
    out["comm"] = np.asarray(comm_exposed * pp)
    out["overhead"] = np.asarray(overhead)
    return StepCost(total=np.asarray(total), by_kind=out, compute_bound=np.asarray(tc_sum * pp),
                    memory_bound=np.asarray(tm_sum * pp), comm_exposed=np.asarray(comm_exposed * pp),
                    by_op=None if by_op is None else {k: np.asarray(v * pp) for k, v in by_op.items()},
                    op_info=op_info)
