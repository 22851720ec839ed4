"""Parallel layouts: candidate (tp, pp, ep, dp) tuples, divisibility masks and memory per device.

Weights shard by attention-TP (attention, dense MLP, shared experts), by tp = ep·(tp/ep) for
routed experts, and by pp over layers. The KV cache of a sequence lives on the attention rank
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
    (non-expert linear / attn_tp + routed experts / tp) · weight bytes / pp
    + embedding and LM head / attn_tp · 2 B (16 bit; with pp > 1 the first stage holds the
    embedding and the last the head, so the larger of the two bounds a device).
    """
    linear = model.linear_params_non_expert / layout.attn_tp + model.routed_expert_params / layout.tp
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


def _divisors(n: int, options=POWERS_OF_TWO) -> list[int]:
    return [d for d in options if d <= n and n % d == 0]


def candidate_layouts(plan: Plan, accelerators: int) -> dict[str, np.ndarray]:
    """All (tp, pp, ep, dp) the search space allows on ``accelerators``, as 1-D arrays.

    An instance of tp·pp accelerators must divide the count (replicas are whole instances).
    ep divides tp (MoE only); dp is 1 or tp (attention DP, MoE models when allowed).
    """
    s: SearchSpace = plan.search
    model = plan.model
    domain = plan.hardware.scale_up.domain_size
    tps = s.tp or tuple(t for t in POWERS_OF_TWO if t <= accelerators)
    pps = s.pp or (1, 2, 4, 8)
    rows = []
    for tp in tps:
        for pp in pps:
            if accelerators % (tp * pp):
                continue
            if model.is_moe:
                ep_max = s.ep_max or domain
                eps = s.ep or tuple(e for e in _divisors(tp) if e <= max(ep_max, 1))
            else:
                eps = s.ep or (1,)
            dps = s.dp or ((1, tp) if (s.attention_dp and model.is_moe and tp > 1) else (1,))
            for ep in eps:
                for dp in dps:
                    rows.append((tp, pp, ep, dp))
    if not rows:
        return {k: np.zeros(0) for k in ("tp", "pp", "ep", "dp")}
    arr = np.array(sorted(set(rows)), dtype=float)
    return {"tp": arr[:, 0], "pp": arr[:, 1], "ep": arr[:, 2], "dp": arr[:, 3]}


def layout_axis(layouts: dict[str, np.ndarray]) -> Layout:
    """Layout arrays shaped [n_layouts, 1] from the 1-D candidate arrays (the grid's first axis)."""
    return Layout(tp=layouts["tp"][:, None], pp=layouts["pp"][:, None], ep=layouts["ep"][:, None],
                  dp=layouts["dp"][:, None])


def layout_feasibility(model: ModelSpec, layout: Layout, accelerators):
    """Divisibility mask and reason codes for layout arrays."""
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
        ok, reason = require(ok, reason, np.mod(model.moe.n_routed_experts, layout.ep) == 0, Reason.DIVISIBILITY)
    ok, reason = require(ok, reason, layout.pp <= model.n_layers, Reason.DIVISIBILITY)
    ok, reason = require(ok, reason, np.mod(accelerators, layout.tp * layout.pp) == 0, Reason.DIVISIBILITY)
    return ok, reason
