"""Step costing: the time of one engine step of one instance, with a breakdown.

Builds the stage's operator graph for a ``Shape`` and ``Layout`` (arrays), applies the plan's
graph passes, prices every op with the roofline or the collective model, and sums. Pipeline
parallelism processes pp micro-batches of 1/pp of the sequences through layers/pp per stage,
so a full step (every sequence advances once) takes pp stage times.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import comm, roofline
from .graph import Layout, OpKind, Shape, build_graph
from .plan import Plan
from .units import MS, PACKED_BYTES_PER_ELEMENT

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
    """Per op name: (kind, bound) where bound is compute, softmax (the exponential unit), memory or
    communication."""


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
    # ep not dividing E: ranks hold ⌈E/ep⌉ or ⌊E/ep⌋ experts; the balancer fills the spare slots with
    # copies of hot experts, removing the same share e_eplb of this placement skew
    uneven = 1.0 + (np.ceil(experts_per_rank - 1e-9) / experts_per_rank - 1.0) * (1 - plan.eplb_efficiency)
    return np.where(ep > 1, np.minimum((1.0 + skew + noise) * uneven, ep), 1.0)  # the busiest rank holds at most all


@dataclass
class _Priced:
    """Sums over one stage graph's ops (arrays)."""

    by_kind: dict[str, np.ndarray]
    compute_bound: np.ndarray
    memory_bound: np.ndarray
    kernels: np.ndarray
    by_op: dict[str, np.ndarray] | None
    op_info: dict[str, tuple[str, str]] | None

    @property
    def compute(self):
        return self.by_kind["gemm"] + self.by_kind["attention"] + self.by_kind["elementwise"]


def stage_graph(plan: Plan, layout: Layout, stage_shape: Shape):
    """Operator graph of one pipeline stage's step: the model's blocks, the optimizations' extra
    ops (e.g. MTP drafting) and the plan's graph passes (e.g. fusion)."""
    imbalance = moe_imbalance(plan, layout, stage_shape.new_tokens)
    parts = plan.formats.components()
    graph = None
    for share, fmt in parts:  # a mixed-precision checkpoint: each format's share of the layers
        p = plan if len(parts) == 1 else replace(plan, formats=fmt)
        g = build_graph(p.model, stage_shape, layout, fmt, moe_imbalance=imbalance, dispatch_bytes=p.dispatch_bytes)
        for _, extra in p.step_extras:
            g = g + extra(p, layout, stage_shape, imbalance)
        for _, graph_pass in p.graph_passes:
            g = graph_pass(g)
        if len(parts) > 1:
            g = replace(g, ops=tuple(replace(op, count=op.count * share) for op in g.ops))
        graph = g if graph is None else graph + g
    return graph


def _price(plan: Plan, graph, detail: bool) -> _Priced:
    """Roofline or collective time of every op, summed by kind (one stage step, no overheads).

    Notes
    -----
    A compute op's time is max(t_tensor, t_memory, t_exp): t_exp = exps / (η_exp · exp_rate) prices
    its softmax exponentials on the special-function unit at ``efficiency.exp_fraction``
    (profiles without ``compute.exp_rate_tera_per_s`` have no such roof). Exponential-bound time
    counts as compute-bound. A GEMM's compute efficiency is the small-M knee (``gemm_m_half``) times
    the k-depth share n / (n + ``gemm_k_overhead_blocks``) of its n 128-byte k-blocks per rank
    (``roofline.k_depth_efficiency``), times the round's maturity: ``kernel_efficiency`` for dense
    GEMMs and attention, ``moe_kernel_efficiency`` alone for routed-expert GEMMs (their own
    backend's kernels, ``PresetSpec.moe_backend``), which also scales their weight-streaming
    efficiency (``moe_memory_fraction``, at most the dense ``memory_fraction``). A dense
    block-scaled FP4 GEMM streams its weights at ``fp4_memory_fraction`` on a GPU with FP4 tensor
    cores (``memory_fraction`` elsewhere).
    """
    hw = plan.hardware
    exp_rate = hw.compute.exp_rate
    eff = hw.efficiency
    c_eff = eff.compute_fraction * plan.kernel_efficiency
    a_eff = eff.attention_fraction * plan.kernel_efficiency
    by_kind = {k: 0.0 for k in KINDS}
    tc_sum = tm_sum = n_kernels = 0.0
    by_op = {} if detail else None
    op_info = {} if detail else None
    for op in graph.ops:
        if op.kind == OpKind.COMM:
            t = op.count * comm.collective_time(op.collective, op.bytes, op.group, hw, fanout=op.fanout)
            by_kind["comm"] = by_kind["comm"] + t
            n_kernels = n_kernels + op.count * (np.asarray(op.group) > 1)
        else:
            overlap = 1.0
            if op.kind == OpKind.GEMM:
                # routed-expert GEMMs run the MoE backend's own kernels: their maturity is the MoE
                # factor alone, not the dense kernels' on top of it
                maturity = plan.moe_kernel_efficiency if op.grouped else 1.0
                base = eff.compute_fraction * maturity if op.grouped else c_eff
                ce = roofline.gemm_efficiency(op.m, base, eff.gemm_m_half)
                if eff.gemm_k_overhead_blocks > 0:
                    ce = ce * roofline.k_depth_efficiency(op.k, PACKED_BYTES_PER_ELEMENT.get(op.precision, 2.0),
                                                          eff.gemm_k_overhead_blocks)
                overlap = eff.gemm_overlap
            else:
                ce = a_eff if op.kind == OpKind.ATTENTION else c_eff
                own = getattr(eff, op.compute_efficiency) if op.compute_efficiency else None
                if own is not None:  # the op's own efficiency field, where the profile sets it
                    ce = own * plan.kernel_efficiency
            # fp4 weights on a GPU without FP4 tensor cores stream at the dense rate
            me = getattr(eff, op.memory_efficiency if hw.has_efficiency(op.memory_efficiency) else "memory_fraction")
            if op.kind == OpKind.GEMM and op.grouped and maturity != 1.0:
                # a routed-expert kernel's maturity is its weight streaming as much as its MMA rate: at
                # decode batch the grouped GEMM is memory-bound, so a newer backend that streams the
                # experts closer to the dense kernels' rate shows there; never past the dense rate
                me = min(me * maturity, max(eff.memory_fraction, me))
            t1, tc, tm = roofline.op_time(op.flops, op.bytes, hw.compute.flop_rate(op.precision), hw.memory.bandwidth,
                                          ce, me, overlap)
            t1, tc, exp_bound = roofline.exp_roof(t1, tc, op.exps, exp_rate, eff.exp_fraction)
            t = op.count * t1
            by_kind[op.kind.value] = by_kind[op.kind.value] + t
            compute_bound = tc >= tm
            tc_sum = tc_sum + np.where(compute_bound, t, 0.0)  # count·where(c, t1, 0) = where(c, count·t1, 0)
            tm_sum = tm_sum + np.where(compute_bound, 0.0, t)
            # an op with no work (e.g. prefill attention in a decode-only step) is not launched
            n_kernels = n_kernels + op.count * ((np.asarray(op.flops) > 0) | (np.asarray(op.bytes) > 0))
        if detail:
            by_op[op.name] = by_op.get(op.name, 0.0) + t
            if op.kind == OpKind.COMM:
                bound = "communication"
            else:
                bound = "compute" if float(np.mean(compute_bound)) >= 0.5 else "memory"
                if bound == "compute" and float(np.mean(exp_bound)) >= 0.5:
                    bound = "softmax"
            op_info[op.name] = (op.kind.value, bound)
    return _Priced(by_kind, tc_sum, tm_sum, n_kernels, by_op, op_info)


def _steps_per_prompt(plan: Plan, layout: Layout, shape: Shape):
    """Engine iterations one prompt's tokens span: 1 unless a chunked token budget splits it, then
    its length over the budget its rank has left beside its decode rows."""
    e = plan.engine
    if e.max_num_tokens is None or not e.chunked_prefill:
        return 1.0
    free = e.free_tokens(np.asarray(shape.decode_seqs, dtype=float) * shape.decode_q / layout.dp)
    return np.maximum(np.asarray(shape.prefill_len, dtype=float) / free, 1.0)


def step_cost(plan: Plan, layout: Layout, shape: Shape, *, detail: bool = False) -> StepCost:
    """Cost of one engine step of one instance (all sequences advance once).

    Parameters
    ----------
    plan : Plan
    layout : Layout, arrays broadcastable with the shape arrays
    shape : Shape of the whole instance step (before micro-batching)
    detail : also return per-op times (for ``--explain``)

    Notes
    -----
    stage = compute + exposed communication + kernels · launch; step = pp · (stage + host).
    With overlap (``plan.comm_overlap`` = f > 0) the engine may instead split the step into two
    micro-batches of half the tokens, each re-reading the weights and launching its own kernels,
    and hide a share f of the communication behind the other micro-batch's compute:
    stage₂ = 2·(compute½ + kernels½·launch) + 2·comm½ − f·min(2·comm½, 2·compute½).
    The engine runs whichever is faster, so the step time never falls when a sequence is added
    (both branches grow with the batch) and the break-even batch emerges from the weights'
    re-read cost rather than a threshold (SGLang two-batch overlap: slower at 32 tokens per
    device, break-even near 64-128; shared/reference/effects.md section 5).
    """
    hw = plan.hardware
    eff = hw.efficiency
    stage_shape = shape.scaled(1.0 / layout.pp)
    launch = eff.launch_overhead_us * 1e-6 * plan.launch_scale
    if plan.launch_scale < 1.0:
        # Steps with more sequences per rank than the largest captured graph run eagerly, and so do
        # steps that carry prompt tokens unless the stack's graphs capture them too. A steady-state
        # average shape (``prefill_seqs`` < 1 prompts per step) carries prompt tokens on about that
        # share of its steps: only those launch eagerly.
        prompts = np.asarray(shape.prefill_seqs, dtype=float)
        eager = 0.0
        if np.any(prompts > 0) and not plan.engine.graphs_capture_prompts:
            eager = np.clip(prompts * _steps_per_prompt(plan, layout, shape), 0.0, 1.0)
        gmax = plan.graph_max_batch
        if gmax is not None:  # no graphs at all (0): every iteration
            eager = np.where((stage_shape.decode_seqs / layout.dp > gmax) | (gmax == 0), 1.0, eager)
        launch = launch + eager * (eff.launch_overhead_us * 1e-6 - launch)
    whole = _price(plan, stage_graph(plan, layout, stage_shape), detail)
    compute = whole.compute
    comm_total = whole.by_kind["comm"]
    stage = compute + comm_total + whole.kernels * launch
    comm_exposed = comm_total
    if plan.comm_overlap > 0:
        half = _price(plan, stage_graph(plan, layout, stage_shape.scaled(0.5)), False)
        comm2, compute2 = 2 * half.by_kind["comm"], 2 * half.compute
        exposed2 = comm2 - plan.comm_overlap * np.minimum(comm2, compute2)
        split = compute2 + exposed2 + 2 * half.kernels * launch
        use_split = split < stage
        stage = np.where(use_split, split, stage)
        comm_exposed = np.where(use_split, exposed2, comm_total)
        compute = np.where(use_split, compute2, compute)
        kernels = np.where(use_split, 2 * half.kernels, whole.kernels)
        scale = np.where(use_split, compute2 / np.maximum(whole.compute, 1e-300), 1.0)
    else:
        kernels = whole.kernels
        scale = 1.0
    pp = layout.pp
    # each pipeline micro-batch is its own engine iteration with its own host overhead
    host = eff.step_overhead_ms * MS * plan.host_overhead_scale
    if plan.engine.overlap_scheduler:  # prepared during the previous GPU step: only its excess shows
        host = np.maximum(host - stage, 0.0)
    overhead = pp * (kernels * launch + host)
    total = pp * (stage + host)
    out = {k: np.asarray(v * scale * pp) for k, v in whole.by_kind.items() if k not in ("comm", "overhead")}
    out["comm"] = np.asarray(comm_exposed * pp)
    out["overhead"] = np.asarray(overhead)
    by_op = None
    if whole.by_op is not None:  # as the kinds: compute ops at the chosen branch's scale, collectives at their exposed share
        with np.errstate(invalid="ignore", divide="ignore"):
            shown = np.where(comm_total > 0, comm_exposed / np.where(comm_total > 0, comm_total, 1.0), 1.0)
        by_op = {k: np.asarray(v * (shown if whole.op_info[k][0] == "comm" else scale) * pp) for k, v in whole.by_op.items()}
    return StepCost(total=np.asarray(total), by_kind=out, compute_bound=np.asarray(whole.compute_bound * scale * pp),
                    memory_bound=np.asarray(whole.memory_bound * scale * pp), comm_exposed=np.asarray(comm_exposed * pp),
                    by_op=by_op, op_info=whole.op_info)
