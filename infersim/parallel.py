"""Parallel layouts: candidate (tp, pp, ep, dp) tuples, divisibility masks and memory per device.

An instance is tp GPUs per stage × pp stages. Attention runs attention-TP (tp/dp) × attention-DP
(dp) over the tp GPUs, MoE layers expert-parallel (ep) × expert-TP (tp/ep) over the same GPUs,
as in TensorRT-LLM / SGLang (DEP16 = tp 16, dp 16, ep 16). Weights shard by attention-TP
(attention, dense MLP, shared experts), by ⌈E/ep⌉ expert slots / expert-TP for routed experts
(ep divides E unless an expert load balancer fills spare slots with redundant experts), and by
pp over layers. The KV cache of a sequence lives on the attention rank
that serves it; GQA heads split over attention-TP (replicated below n_kv_heads), the MLA latent
does not split. Usable memory = capacity − reserve − weights − activations, times kv_fraction.
"""

from __future__ import annotations

import numpy as np

from .errors import Reason, require
from .graph import HIDDEN_BYTES, Formats, Layout
from .plan import Plan, SearchSpace
from .specs.model import GqaAttention, ModelSpec
from .units import BYTES_PER_ELEMENT, GIB

POWERS_OF_TWO = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


def weight_bytes_per_device(model: ModelSpec, layout: Layout, fmt: Formats):
    """Weight bytes on one device (broadcasts over layout arrays).

    Notes
    -----
    (non-expert linear / attn_tp + ⌈E/ep⌉ expert slots per MoE layer / (tp/ep)) · weight bytes / pp
    + embedding and LM head / attn_tp · 2 B (16 bit; with pp > 1 the first stage holds the
    embedding and the last the head, so the larger of the two bounds a device).
    """
    routed = model.n_moe_layers * expert_slots_per_rank(model, layout) * model.expert_params / layout.moe_tp
    linear = model.linear_params_non_expert / layout.attn_tp + routed
    # the first stage holds the embedding, the last the LM head; with pp = 1 one device holds both
    tables = np.where(np.asarray(layout.pp) > 1, max(model.embedding_params, model.lm_head_params),
                      model.embedding_params + model.lm_head_params)
    emb = tables / layout.attn_tp * BYTES_PER_ELEMENT["bf16"]
    return linear * fmt.wb / layout.pp + emb


def kv_share(model: ModelSpec, layout: Layout):
    """Fraction of a sequence's per-layer KV held by one attention rank."""
    att = model.attention
    if isinstance(att, GqaAttention):
        return (np.maximum(att.n_kv_heads, layout.attn_tp) / layout.attn_tp) / att.n_kv_heads
    return np.ones_like(np.asarray(layout.attn_tp, dtype=float))  # MLA latent: whole per rank


def kv_bytes_per_seq_device(model: ModelSpec, layout: Layout, fmt: Formats, context_len):
    """KV bytes one sequence of ``context_len`` tokens occupies on its attention rank."""
    return model.kv_cache_bytes(context_len, fmt.kv_cache) * kv_share(model, layout) / layout.pp


def activation_bytes(model: ModelSpec, layout: Layout, step_tokens):
    """Transient activation workspace for a step of ``step_tokens`` tokens per instance."""
    inter = max(model.intermediate_size or 0, (model.moe.expert_intermediate_size * model.moe.top_k) if model.moe else 0)
    per_token = (4 * model.hidden_size + 2 * inter / layout.attn_tp) * HIDDEN_BYTES
    return step_tokens / layout.dp * per_token


def kv_budget_per_device(plan: Plan, layout: Layout, step_tokens):
    """Bytes available for KV cache on one device (may be negative: weights do not fit)."""
    mem = plan.hardware.memory
    free = mem.capacity_bytes - mem.reserve_gib * GIB - weight_bytes_per_device(plan.model, layout, plan.formats)
    free = free - activation_bytes(plan.model, layout, step_tokens)
    return free * mem.kv_fraction


def max_batch(plan: Plan, layout: Layout, context_len, step_tokens):
    """Largest number of sequences of mean context ``context_len`` one instance can hold."""
    per_seq = kv_bytes_per_seq_device(plan.model, layout, plan.formats, context_len)
    budget = kv_budget_per_device(plan, layout, step_tokens)
    return np.maximum(budget, 0.0) / per_seq * layout.dp


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def instance_sizes(accelerators: int, domain: int) -> list[int]:
    """Candidate GPUs per pipeline stage of one instance (the ``tp`` axis), at most ``accelerators``.

    Powers of two, the divisors of the scale-up domain (NVL72: 3, 6, 9, 12, 18, 24, 36, 72) and
    whole multiples of the domain (several racks as one instance). Sizes that leave GPUs idle are
    allowed: replicas × size ≤ accelerators. The set only grows with the accelerator count, so
    every layout possible on N stays possible on N + 1 (the optimum is monotone in N).
    """
    sizes = {t for t in POWERS_OF_TWO if t <= accelerators}
    sizes |= {d for d in _divisors(min(domain, 4096)) if d <= accelerators}
    sizes |= {domain * m for m in range(1, accelerators // domain + 1)} if domain > 1 and accelerators // domain <= 64 else set()
    return sorted(sizes)


def expert_slots_per_rank(model: ModelSpec, layout: Layout):
    """Routed-expert slots on one EP rank: ⌈E/ep⌉. When ep does not divide E the spare slots hold
    redundant copies of popular experts (DeepSeek: 256 experts + 32 redundant over EP144, 2 per
    GPU; effects.md section 4); 1 for dense models."""
    if model.moe is None:
        return np.ones_like(np.asarray(layout.ep, dtype=float))
    return np.ceil(model.moe.n_routed_experts / np.asarray(layout.ep, dtype=float) - 1e-9)


def redundant_experts(model: ModelSpec, layout: Layout):
    """Slots beyond one copy of each routed expert across the EP group: ep·⌈E/ep⌉ − E."""
    if model.moe is None:
        return np.zeros_like(np.asarray(layout.ep, dtype=float))
    return expert_slots_per_rank(model, layout) * layout.ep - model.moe.n_routed_experts


def redundant_slots(plan: Plan) -> bool:
    """Whether an expert load balancer runs (``plan.eplb_efficiency`` > 0, set by ``wide_ep``), so
    EP ranks may hold spare slots with redundant experts and ep need not divide the expert count."""
    return plan.eplb_efficiency > 0


def _feasible_rows(plan: Plan, rows: list[tuple], accelerators: int) -> list[tuple]:
    """Rows that divide the model and whose weights fit; all rows when none pass (their reasons
    are then reported)."""
    if not rows:
        return rows
    arr = np.array(rows, dtype=float)
    lay = Layout(tp=arr[:, 0], pp=arr[:, 1], ep=arr[:, 2], dp=arr[:, 3])
    ok = layout_feasibility(plan.model, lay, accelerators, redundant_slots(plan))[0]
    divisible = [r for r, good in zip(rows, ok) if good]
    fits = ok & (kv_budget_per_device(plan, lay, 0.0) > 0)
    return [r for r, good in zip(rows, fits) if good] or divisible or rows


def candidate_layouts(plan: Plan, accelerators: int, *, fixed: bool = True) -> dict[str, np.ndarray]:
    """Every (tp, pp, ep, dp) the search space allows on ``accelerators``, as 1-D arrays.

    tp: GPUs per stage of one instance (``instance_sizes``), tp·pp ≤ accelerators (leftover GPUs
    stay idle). Attention runs tp/dp-way tensor parallel on dp data-parallel groups; MoE layers
    run ep-way expert parallel × tp/ep-way expert-tensor parallel over the same tp GPUs; dp and
    ep are any divisors of tp the model's heads, expert widths and ``ep_max`` allow; a MoE stage
    spreads its experts over at most ``ep_max`` GPUs (EP × expert TP: TP8 / DEP8 inside one HGX
    node unless wide EP raises it, effects.md section 4). Pipeline
    stages are tried with attention DP and EP each off or spanning tp. Layouts that
    fail the divisibility rules, or whose weights do not fit, are dropped (kept when none pass,
    to report why).
    ``fixed=False`` ignores the CLI-fixed tp/ep/dp/pp (a disaggregated prefill pool searches
    its own layouts).
    """
    s: SearchSpace = plan.search
    model = plan.model
    domain = plan.hardware.scale_up.domain_size
    pick = (lambda v: v) if fixed else (lambda v: None)
    tps = pick(s.tp) or tuple(instance_sizes(accelerators, domain))
    pps = pick(s.pp) or (1, 2, 4, 8)
    rows = []
    for tp in tps:
        divs = _divisors(int(tp))
        if model.is_moe and tp > max(s.ep_max, 1) and not pick(s.tp):
            continue  # the experts of a stage are spread over at most ep_max GPUs (EP × expert TP)
        if model.is_moe:
            eps = pick(s.ep) or tuple(e for e in divs if e <= max(s.ep_max, 1))
            dps = pick(s.dp) or (tuple(divs) if s.attention_dp else (1,))
        else:
            eps = pick(s.ep) or (1,)
            dps = pick(s.dp) or (1,)
        for dp in dps:
            for pp in pps:
                if tp * pp > accelerators or (pp > 1 and 1 < dp < tp and not pick(s.pp)):
                    continue
                for ep in eps:
                    if pp > 1 and 1 < ep < tp and not pick(s.pp):
                        continue  # pipelining is the memory fallback: experts all-EP or all-TP there
                    rows.append((tp, pp, ep, dp))
    rows = _feasible_rows(plan, sorted(set(rows)), accelerators)
    if not rows:
        return {k: np.zeros(0) for k in ("tp", "pp", "ep", "dp")}
    arr = np.array(rows, dtype=float)
    return {"tp": arr[:, 0], "pp": arr[:, 1], "ep": arr[:, 2], "dp": arr[:, 3]}


def layout_axis(layouts: dict[str, np.ndarray]) -> Layout:
    """Layout arrays shaped [n_layouts, 1] from the 1-D candidate arrays (the grid's first axis)."""
    return Layout(tp=layouts["tp"][:, None], pp=layouts["pp"][:, None], ep=layouts["ep"][:, None],
                  dp=layouts["dp"][:, None])


def layout_feasibility(model: ModelSpec, layout: Layout, accelerators, redundant_slots: bool = True):
    """Divisibility mask and reason codes for layout arrays.

    dp and ep divide tp; attention TP (tp/dp) divides the query heads (and divides or is a
    multiple of the KV heads); expert TP (tp/ep) divides the expert width; an instance fits the
    accelerators (tp·pp ≤ count, leftover GPUs idle). With ``redundant_slots`` (an expert load
    balancer runs) ep need not divide the expert count: ⌈E/ep⌉ slots per rank, the spare ones
    holding redundant experts. Without one, every rank holds the same E/ep experts, so ep divides
    E: TensorRT-LLM 1.x sets the slot count to E without a load balancer and asserts that ep
    divides it (tensorrt_llm/_torch/modules/fused_moe MoeLoadBalancerConfig.setup); EP9 or EP12
    over DeepSeek's 256 experts need EPLB's redundant slots (e.g. 288).
    """
    ok = np.ones(np.broadcast(layout.tp, layout.pp, layout.ep, layout.dp).shape, dtype=bool)
    reason = np.zeros(ok.shape, dtype=np.int16)
    att = model.attention
    a = layout.attn_tp
    ok, reason = require(ok, reason, np.mod(layout.tp, layout.dp) == 0, Reason.DIVISIBILITY)
    ok, reason = require(ok, reason, np.mod(layout.tp, layout.ep) == 0, Reason.DIVISIBILITY)
    ok, reason = require(ok, reason, np.mod(att.n_heads, a) == 0, Reason.DIVISIBILITY)
    if isinstance(att, GqaAttention):
        kv = att.n_kv_heads
        ok, reason = require(ok, reason, (np.mod(kv, a) == 0) | (np.mod(a, kv) == 0), Reason.DIVISIBILITY)
    if model.moe:
        ok, reason = require(ok, reason, np.mod(model.moe.expert_intermediate_size, layout.moe_tp) == 0,
                             Reason.DIVISIBILITY)
        ok, reason = require(ok, reason, layout.ep <= model.moe.n_routed_experts, Reason.DIVISIBILITY)
        if not redundant_slots:
            ok, reason = require(ok, reason, np.mod(model.moe.n_routed_experts, layout.ep) == 0, Reason.DIVISIBILITY)
    else:
        ok, reason = require(ok, reason, np.asarray(layout.ep) == 1, Reason.DIVISIBILITY)
    ok, reason = require(ok, reason, layout.pp <= model.n_layers, Reason.DIVISIBILITY)
    ok, reason = require(ok, reason, layout.tp * layout.pp <= accelerators, Reason.DIVISIBILITY)
    return ok, reason


def packed_instances(accelerators, size, domain):
    """Whole instances of ``size`` accelerators on ``accelerators``, none straddling a scale-up domain.

    Notes
    -----
    An instance of s ≤ d accelerators runs its tensor/expert-parallel collectives on the scale-up
    fabric only if it sits inside one domain of d (an NVL72 rack, an 8-GPU HGX node): each full
    domain holds ⌊d/s⌋ instances and the partial last domain of N mod d holds ⌊(N mod d)/s⌋; the
    d mod s accelerators left in each domain stay idle (18 DEP16 instances do not fit 4 NVL72
    racks, 16 do). An instance larger than a domain spans ⌈s/d⌉ domains by design (its
    collectives are costed hierarchically, ``infersim.comm``): ⌊N/s⌋. Non-decreasing in N.
    """
    n = np.asarray(accelerators, dtype=float)
    s = np.asarray(size, dtype=float)
    d = float(max(domain, 1))
    packed = np.floor(n / d) * np.floor(d / s) + np.floor(np.mod(n, d) / s)
    return np.where(s <= d, packed, np.floor(n / s))


def packed_second_pool(accelerators, domain, first, size_first, size_second):
    """Workers of ``size_second`` that fit beside ``first`` workers of ``size_first`` (broadcasts).

    Notes
    -----
    Neither pool straddles a scale-up domain. The first pool (disaggregated decode workers) puts k
    of its workers in the partial last domain (N mod d) and the others densely into full domains,
    ⌊d/s₁⌋ per domain, its last few in one more; the second pool (prefill workers) takes
    ⌊free/s₂⌋ in each domain. The best of k ∈ {0, as many as fit, D mod ⌊d/s₁⌋} is returned
    (tests/test_parallel.py checks it against exhaustive placement). When either size exceeds
    the domain the pools are placed over the flat count, ⌊(N − D·s₁)/s₂⌋. Negative when the
    first pool does not fit.
    """
    n = np.asarray(accelerators, dtype=float)
    D = np.asarray(first, dtype=float)
    s1 = np.asarray(size_first, dtype=float)
    s2 = np.asarray(size_second, dtype=float)
    if n.size == 1 and np.broadcast(D, s1, s2).size > _TABLE_MIN and _integral(D, s1, s2):
        return _packed_second_pool_table(n, domain, D, s1, s2)
    return _packed_second_pool(n, domain, D, s1, s2)


def _packed_second_pool(n, domain, D, s1, s2):
    d = float(max(domain, 1))
    flat = np.floor((n - D * s1) / s2)
    full, part = np.floor(n / d), np.mod(n, d)
    q = np.maximum(np.floor(d / s1), 1.0)  # first-pool workers per full domain
    in_part_max = np.minimum(D, np.floor(part / s1))
    best = np.full(np.broadcast(n, D, s1, s2).shape, -1.0)
    for k in (0.0 * D, in_part_max, np.minimum(np.mod(D, q), in_part_max)):
        left = D - k
        f = np.floor(left / q)  # full domains holding only the first pool
        rest = left - f * q  # its last workers, in one more full domain
        used = f + (rest > 0)
        value = (f * np.floor((d - q * s1) / s2) + (rest > 0) * np.floor((d - rest * s1) / s2)
                 + (full - used) * np.floor(d / s2) + np.floor((part - k * s1) / s2))
        best = np.maximum(best, np.where(used <= full, value, -1.0))
    return np.where((s1 <= d) & (s2 <= d), best, flat)


_TABLE_MIN = 4096
"""Broadcast size above which ``packed_second_pool`` is evaluated once per distinct (D, s₁, s₂)."""


def _integral(*arrays) -> bool:
    return all(np.array_equal(a, np.floor(a)) for a in arrays)


def _packed_second_pool_table(n, domain, D, s1, s2):
    """``packed_second_pool`` on a large grid of whole counts and sizes: evaluated on the table of
    the few distinct sizes × every count in range, then gathered (the same values, one gather
    instead of some forty full-grid array operations)."""
    u1, i1 = np.unique(s1, return_inverse=True)
    u2, i2 = np.unique(s2, return_inverse=True)
    lo, hi = float(D.min(initial=0.0)), float(D.max(initial=0.0))
    counts = np.arange(lo, hi + 1.0)
    table = _packed_second_pool(n, domain, counts[None, None, :], u1[:, None, None], u2[None, :, None])
    return table[i1.reshape(s1.shape), i2.reshape(s2.shape), (D - lo).astype(np.intp)]


def replicas(layout: Layout, accelerators, domain: int = 1):
    """Whole instances that fit on ``accelerators`` (``packed_instances``; the rest are idle).
    ``domain``: accelerators per scale-up domain (1: no packing constraint beyond the total)."""
    return packed_instances(accelerators, layout.tp * layout.pp, domain) if domain > 1 else \
        np.floor(accelerators / (layout.tp * layout.pp))
