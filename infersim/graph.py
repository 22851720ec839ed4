"""Operator graph: per-device operator records for one engine step of one pipeline stage.

One set of block builders serves both phases; the phase enters only through the ``Shape`` (how
many sequences decode, with how much context, and how many prompt tokens are prefilled in the
same step). Every numeric field may be a numpy array broadcasting over a configuration grid.
Layer counts become the op's ``count`` (layers per pipeline stage).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import numpy as np

from .specs.model import GqaAttention, MlaAttention, ModelSpec
from .units import BYTES_PER_ELEMENT, PRECISIONS

ArrayLike = Any


class OpKind(str, Enum):
    GEMM = "gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    COMM = "comm"
    KV_TRANSFER = "kv_transfer"


class Collective(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    ALL_TO_ALL = "all_to_all"
    P2P = "p2p"


@dataclass(frozen=True)
class Fanout:
    """How an MoE all-to-all spreads one token: its bytes and its routing (``comm.domain_fanout``)."""

    token_bytes: Any
    """Bytes of the rank's tokens, one copy each (tokens per rank × hidden × bytes per element)."""
    top_k: int
    n_groups: int | None = None
    top_k_groups: int | None = None
    share: Any = 1.0
    """Share of the tokens sent once per destination domain: prompt tokens, which DeepEP's normal
    kernels forward over NVLink inside each node; decode tokens go by its low-latency kernels, one
    RDMA send per destination rank (the even spread)."""


@dataclass(frozen=True)
class Op:
    """One operator (or collective) repeated ``count`` times per stage step, per device.

    ``flops`` is a count of floating-point operations, ``bytes`` the HBM traffic (read + write)
    for compute ops or the payload per device for collectives. ``m`` is the GEMM row count that
    sets small-GEMM efficiency. ``group`` is the collective's participant count.
    """

    name: str
    kind: OpKind
    count: ArrayLike
    flops: ArrayLike = 0.0
    bytes: ArrayLike = 0.0
    precision: str = "bf16"
    m: ArrayLike | None = None
    k: ArrayLike = 0.0
    """A GEMM's reduction depth per rank (elements), which sets its k-depth efficiency; 0 for ops
    that are not tiled GEMMs."""
    collective: Collective | None = None
    group: ArrayLike = 1
    fusable: bool = False
    """Elementwise op that a fusion pass may fold into its producer."""
    grouped: bool = False
    """Routed-expert grouped GEMM: its efficiency follows the MoE kernel backend's maturity."""
    block: str = ""
    """Which block the op belongs to (attention, mlp, moe, head), for breakdowns."""
    fanout: Fanout | None = None
    """An all-to-all that sends each token once per destination domain (MoE dispatch/combine)."""
    memory_efficiency: str = "memory_fraction"
    """Name of the hardware efficiency field that scales this op's bandwidth (data, not a branch)."""
    compute_efficiency: str = ""
    """Name of the hardware efficiency field that scales this non-GEMM op's FLOP rate; empty, or a
    field the profile leaves None: by kind (``attention_fraction`` for attention,
    ``compute_fraction`` otherwise)."""
    exps: ArrayLike = 0.0
    """Exponentials the op evaluates on the special-function unit: an attention kernel's softmax
    takes one per query-key score per head (FlashAttention; arXiv 2407.08608 section 1)."""


@dataclass(frozen=True)
class Formats:
    """Resolved numeric formats of one configuration."""

    weights: str
    activations: str
    kv_cache: str
    vision_attention: str = "bf16"
    """Compute format of a vision encoder's attention (16 bit unless the engine runs it in fp8,
    e.g. vLLM ``VLLM_MM_ENCODER_FP8_ATTN=1`` in the NVIDIA v6.0 Qwen3-VL recipes)."""
    weight_mix: tuple[tuple[str, float], ...] | None = None
    """A mixed-precision checkpoint: (format, share of the linear layers' weights) pairs, each layer
    in one format with activations to match (ModelOpt AutoQuantize); None: every layer in
    ``weights``. ``weights`` is then the format of the largest share."""

    def components(self) -> tuple[tuple[float, "Formats"], ...]:
        """(share, uniform formats) per format of the checkpoint: the layers of each share run their
        GEMMs at that format (one component of share 1 without a mix)."""
        if self.weight_mix is None:
            return ((1.0, self),)
        return tuple((share, replace(self, weights=p, activations=p, weight_mix=None)) for p, share in self.weight_mix)

    @property
    def gemm(self) -> str:
        """GEMMs run at the wider of the weight and activation formats."""
        return max(self.weights, self.activations, key=lambda p: BYTES_PER_ELEMENT[p])

    @property
    def attention(self) -> str:
        """Prefill attention runs in fp8 when the KV cache is fp8 (FP8 context FMHA), else 16 bit."""
        return "fp8" if BYTES_PER_ELEMENT[self.kv_cache] <= 1 else "bf16"

    @property
    def decode_attention(self) -> str:
        """Decode attention computes in 16 bit: generation kernels dequantize an fp8 KV cache
        (TensorRT-LLM XQA / MLA generation kernels in the MLPerf v5.1-v6.0 submissions)."""
        return "bf16"

    @property
    def wb(self) -> float:
        if self.weight_mix is not None:  # bytes per weight averaged over the checkpoint's layers
            return sum(share * BYTES_PER_ELEMENT[p] for p, share in self.weight_mix)
        return BYTES_PER_ELEMENT[self.weights]

    @property
    def ab(self) -> float:
        return BYTES_PER_ELEMENT[self.activations] if self.activations in ("fp8", "bf16", "fp16") else 1.0

    @property
    def kvb(self) -> float:
        return BYTES_PER_ELEMENT[self.kv_cache]


HIDDEN_BYTES = 2.0
"""Residual-stream activations stay 16 bit between blocks (norm inputs, all-reduce payloads)."""


@dataclass(frozen=True)
class Layout:
    """Parallel layout of one serving instance (a model replica), arrays broadcastable.

    tp: GPUs per pipeline stage; pp: pipeline stages. Over the same tp GPUs, attention runs
    attention-TP (tp/dp head shards) × attention-DP (dp groups, each on 1/dp of the sequences)
    and MoE layers run expert-parallel ep × expert-TP tp/ep (experts' intermediate dims split
    tp/ep ways). dp and ep divide tp and are otherwise independent (any divisors, not only
    powers of two). An instance occupies tp*pp accelerators.
    """

    tp: ArrayLike = 1
    pp: ArrayLike = 1
    ep: ArrayLike = 1
    dp: ArrayLike = 1

    @property
    def attn_tp(self):
        return self.tp / self.dp

    @property
    def moe_tp(self):
        return self.tp / self.ep

    @property
    def size(self):
        return self.tp * self.pp


@dataclass(frozen=True)
class Shape:
    """Work of one engine step of one instance (before pipeline micro-batching).

    decode_seqs sequences each process ``decode_q`` query tokens against ``decode_ctx`` cached
    tokens; ``prefill_seqs`` prompts (a steady-state average, may be fractional) of mean length
    ``prefill_len`` and mean square length ``prefill_len_sq`` run in the same step.
    """

    decode_seqs: ArrayLike = 0.0
    decode_q: ArrayLike = 1.0
    decode_ctx: ArrayLike = 0.0
    prefill_seqs: ArrayLike = 0.0
    prefill_len: ArrayLike = 0.0
    prefill_len_sq: ArrayLike = 0.0
    prefill_patches: ArrayLike = 0.0
    """Vision-encoder patches per prompt (multimodal models)."""
    prefill_patches_sq: ArrayLike | None = None
    """Expected sum over a prompt's images of the squared patches per image (the encoder's
    attention is full within each image); None: one image of ``prefill_patches`` patches."""
    prefill_rank_imbalance: ArrayLike = 1.0
    """Busiest attention-DP rank's prefill tokens over the mean: a prompt is prefilled on one
    rank, so with fewer prompts per step than ranks the busiest rank carries a whole prompt while
    the others wait at the next MoE synchronisation."""

    @property
    def decode_tokens(self):
        return self.decode_seqs * self.decode_q

    @property
    def prefill_tokens(self):
        return self.prefill_seqs * self.prefill_len

    @property
    def new_tokens(self):
        return self.decode_tokens + self.prefill_tokens

    def attention_tokens(self, layout: "Layout"):
        """New tokens on the busiest attention rank (attention, dense and shared-expert blocks)."""
        imb = np.where(np.asarray(layout.dp) > 1, self.prefill_rank_imbalance, 1.0)
        return (self.decode_tokens + self.prefill_tokens * imb) / layout.dp

    @property
    def logit_tokens(self):
        """Tokens that need logits: every decode query token and each prompt's last token."""
        return self.decode_tokens + self.prefill_seqs

    def scaled(self, factor) -> "Shape":
        """The same step with sequence counts scaled (pipeline micro-batch: factor = 1/pp)."""
        return replace(self, decode_seqs=self.decode_seqs * factor, prefill_seqs=self.prefill_seqs * factor)


@dataclass(frozen=True)
class OpGraph:
    """Operators of one pipeline stage's step on one device, plus the phase label."""

    ops: tuple[Op, ...]
    phase: str = "mixed"
    passes: tuple[str, ...] = field(default_factory=tuple)

    def __add__(self, other: "OpGraph") -> "OpGraph":
        return replace(self, ops=self.ops + other.ops)


# ---- shape helpers ---------------------------------------------------------------------------


def gemm(name, m, n, k, count, fmt: Formats, block: str, weight_bytes=None, m_eff=None, grouped: bool = False) -> Op:
    """GEMM of an [m, k] activation by a [k, n] weight.

    Notes
    -----
    FLOPs = 2·m·n·k. Bytes = k·n·weight_bytes + m·k·act_bytes (in) + m·n·2 (out, 16 bit).
    ``weight_bytes`` overrides the weight traffic (MoE reads only the experts it touches);
    ``m_eff`` overrides the row count used for small-GEMM efficiency (rows per expert).
    A ``grouped`` GEMM (routed experts) streams at ``efficiency.moe_memory_fraction``, a dense
    block-scaled FP4 one at ``efficiency.fp4_memory_fraction``.
    """
    wbytes = k * n * fmt.wb if weight_bytes is None else weight_bytes
    wbytes = np.where(np.asarray(m) > 0, wbytes, 0.0)  # an empty GEMM is not launched
    traffic = wbytes + m * k * fmt.ab + m * n * HIDDEN_BYTES
    return Op(name, OpKind.GEMM, count, flops=2.0 * m * n * k, bytes=traffic, precision=fmt.gemm,
              m=m if m_eff is None else m_eff, k=k, block=block, grouped=grouped,
              memory_efficiency="moe_memory_fraction" if grouped else
              "fp4_memory_fraction" if fmt.gemm == "fp4" else "memory_fraction")


def elementwise(name, elements, count, block: str, passes: float = 2.0) -> Op:
    """Memory-bound elementwise op over ``elements`` 16-bit values (read + write = 2 passes)."""
    return Op(name, OpKind.ELEMENTWISE, count, flops=0.0, bytes=passes * elements * HIDDEN_BYTES,
              fusable=True, block=block)


def collective(name, kind: Collective, payload_bytes, group, count, block: str, fanout: Fanout | None = None) -> Op:
    """A collective over ``group`` ranks carrying ``payload_bytes`` per rank."""
    return Op(name, OpKind.COMM, count, bytes=payload_bytes, collective=kind, group=group, block=block,
              fanout=fanout)


# ---- attention ------------------------------------------------------------------------------


def _window_pairs(shape: Shape, window):
    """(decode, prefill) query-key pairs per step for layers with context limited to ``window``."""
    ctx = shape.decode_ctx if window is None else np.minimum(shape.decode_ctx, window)
    dec = shape.decode_tokens * ctx
    if window is None:
        pre = shape.prefill_seqs * 0.5 * (shape.prefill_len_sq + shape.prefill_len)
    else:
        L = shape.prefill_len
        pre = shape.prefill_seqs * np.where(L > window, window * L - 0.5 * window * window, 0.5 * (shape.prefill_len_sq + L))
    return dec, pre, ctx


def _rank_imbalance(shape: Shape, layout: Layout):
    return np.where(np.asarray(layout.dp) > 1, shape.prefill_rank_imbalance, 1.0)


def gqa_attention_ops(model: ModelSpec, att: GqaAttention, shape: Shape, layout: Layout, fmt: Formats, layers) -> list[Op]:
    """Q/K/V/O projections and the attention core for GQA/MHA layers.

    Notes
    -----
    Heads split over attn_tp = tp/dp ranks; KV heads are replicated when attn_tp > n_kv_heads.
    Each rank handles 1/dp of the sequences. Core FLOPs = 4·pairs·heads·head_dim (QKᵀ and PV),
    softmax exponentials = pairs·heads (4·head_dim FLOPs per exp); core bytes = KV read for decode (context × KV width × kv bytes) plus KV written for prefill.
    Sliding-window layers cap the pairs and reads at the window.
    """
    h, d = model.hidden_size, att.head_dim
    a = layout.attn_tp
    heads = att.n_heads / a
    kv_heads = np.maximum(att.n_kv_heads, a) / a
    t = shape.attention_tokens(layout)
    ops = [
        gemm("qkv_proj", t, (heads + 2 * kv_heads) * d, h, layers, fmt, "attention"),
        gemm("o_proj", t, h, heads * d, layers, fmt, "attention"),
    ]
    groups = [(model.n_full_attention_layers, None)]
    if att.n_sliding_layers:
        groups = [(model.n_full_attention_layers, None), (att.n_sliding_layers, att.sliding_window_tokens)]
    for n_layers, window in groups:
        frac = layers * (n_layers / model.n_layers)
        dec, pre, ctx = _window_pairs(shape, window)
        td = shape.decode_tokens / layout.dp
        kv_read = shape.decode_seqs * ctx / layout.dp * 2 * kv_heads * d * fmt.kvb
        kv_write = (t - td) * 2 * kv_heads * d * fmt.kvb
        suffix = "" if window is None else "_sliding"
        dec_scores = dec / layout.dp * heads
        pre_scores = pre * _rank_imbalance(shape, layout) / layout.dp * heads
        ops.append(Op("attention_decode" + suffix, OpKind.ATTENTION, frac, flops=4.0 * dec_scores * d,
                      bytes=kv_read + td * 2 * kv_heads * d * fmt.kvb + 2 * td * heads * d * HIDDEN_BYTES,
                      precision=fmt.decode_attention,
                      block="attention", memory_efficiency="kv_memory_fraction", exps=dec_scores))
        ops.append(Op("attention_prefill" + suffix, OpKind.ATTENTION, frac, flops=4.0 * pre_scores * d,
                      bytes=kv_write + 2 * (t - td) * heads * d * HIDDEN_BYTES, precision=fmt.attention,
                      block="attention", exps=pre_scores))
    ops.append(elementwise("rope", t * (heads + kv_heads) * d, layers, "attention"))
    if att.qk_norm:
        ops.append(elementwise("qk_norm", t * (heads + kv_heads) * d, layers, "attention"))
    return ops


def mla_attention_ops(model: ModelSpec, att: MlaAttention, shape: Shape, layout: Layout, fmt: Formats, layers) -> list[Op]:
    """Multi-head latent attention: naive form for prefill tokens, absorbed form for decode.

    Notes
    -----
    Latent KV (kv_lora_rank + rope dims per token per layer) is not split by heads, so every
    attention-TP rank caches and reads the full latent of its sequences (attention DP avoids the
    replication). Prefill: K/V up-projected, core FLOPs 2·pairs·H·(qk_dim + v_dim). Decode
    (absorbed W_UK/W_UV): core FLOPs 2·pairs·H·(2·kv_lora + rope), plus per-token absorption
    GEMMs 2·H·nope·kv_lora and 2·H·kv_lora·v. Both forms take one softmax exponential per
    query-key pair per head. The absorbed decode core runs at ``efficiency.mla_decode_fraction`` of
    peak where the profile sets it (its own kernels, FlashMLA-class: with all heads of a token
    sharing one latent it is compute-bound, ≈2·H FLOPs per KV byte), else at ``attention_fraction``.
    References: DeepSeek-V2 (arXiv 2405.04434) section 2.1; DeepSeek-V3 config.
    """
    h, H = model.hidden_size, att.n_heads
    a = layout.attn_tp
    heads = H / a
    r, rope, nope, vd = att.kv_lora_rank, att.qk_rope_head_dim, att.qk_nope_head_dim, att.v_head_dim
    t = shape.attention_tokens(layout)
    td = shape.decode_tokens / layout.dp
    tp_ = t - td
    ops = []
    if att.q_lora_rank:
        ops.append(gemm("q_a_proj", t, att.q_lora_rank, h, layers, fmt, "attention"))
        ops.append(gemm("q_b_proj", t, heads * (nope + rope), att.q_lora_rank, layers, fmt, "attention"))
    else:
        ops.append(gemm("q_proj", t, heads * (nope + rope), h, layers, fmt, "attention"))
    ops.append(gemm("kv_a_proj", t, r + rope, h, layers, fmt, "attention"))
    # prefill: expand the latent into per-head K_nope and V
    ops.append(gemm("kv_b_proj", tp_, heads * (nope + vd), r, layers, fmt, "attention"))
    # decode: absorb W_UK into the query and W_UV into the output
    ops.append(gemm("q_absorb", td, r, heads * nope, layers, fmt, "attention", weight_bytes=heads * nope * r * fmt.wb))
    ops.append(gemm("v_absorb", td, heads * vd, r, layers, fmt, "attention", weight_bytes=heads * vd * r * fmt.wb))
    dec, pre, ctx = _window_pairs(shape, None)
    latent = (r + rope) * fmt.kvb
    kv_read = shape.decode_seqs * ctx / layout.dp * latent
    dec_scores = heads * dec / layout.dp
    pre_scores = heads * pre * _rank_imbalance(shape, layout) / layout.dp
    ops.append(Op("attention_decode", OpKind.ATTENTION, layers, flops=2.0 * dec_scores * (2 * r + rope),
                  bytes=kv_read + td * latent + 2 * td * heads * (r + rope) * HIDDEN_BYTES, precision=fmt.decode_attention,
                  block="attention", memory_efficiency="kv_memory_fraction",
                  compute_efficiency="mla_decode_fraction", exps=dec_scores))
    ops.append(Op("attention_prefill", OpKind.ATTENTION, layers, flops=2.0 * pre_scores * (nope + rope + vd),
                  bytes=tp_ * latent + 2 * tp_ * heads * (nope + rope + vd) * HIDDEN_BYTES,
                  precision=fmt.attention, block="attention", exps=pre_scores))
    ops.append(gemm("o_proj", t, h, heads * vd, layers, fmt, "attention"))
    ops.append(elementwise("rope_latent_norm", t * (heads * rope + r + rope), layers, "attention"))
    return ops


def attention_ops(model, shape, layout, fmt, layers) -> list[Op]:
    att = model.attention
    ops = (mla_attention_ops if isinstance(att, MlaAttention) else gqa_attention_ops)(model, att, shape, layout, fmt, layers)
    t = shape.attention_tokens(layout)
    ops.append(collective("attn_all_reduce", Collective.ALL_REDUCE, t * model.hidden_size * HIDDEN_BYTES,
                          layout.attn_tp, layers, "attention"))
    return ops


# ---- feed-forward ---------------------------------------------------------------------------


def dense_mlp_ops(model: ModelSpec, shape: Shape, layout: Layout, fmt: Formats, layers) -> list[Op]:
    """Gated MLP (gate+up fused, activation, down), split over the attention-TP group."""
    h, inter = model.hidden_size, model.intermediate_size or 0
    a = layout.attn_tp
    t = shape.attention_tokens(layout)
    return [
        gemm("mlp_gate_up", t, 2 * inter / a, h, layers, fmt, "mlp"),
        elementwise("mlp_act", t * inter / a, layers, "mlp", passes=1.5),
        gemm("mlp_down", t, h, inter / a, layers, fmt, "mlp"),
        collective("mlp_all_reduce", Collective.ALL_REDUCE, t * h * HIDDEN_BYTES, a, layers, "mlp"),
    ]


def expected_experts_touched(n_experts, top_k, tokens):
    """Expected number of distinct experts hit by ``tokens`` tokens routing top-k of E.

    Notes
    -----
    E·(1 − (1 − k/E)^T), assuming independent uniform routing (a lower bound on traffic under
    skewed routing). 1 token → k experts; many tokens → E.
    """
    tokens = np.maximum(tokens, 0.0)
    return n_experts * (1.0 - np.power(1.0 - top_k / n_experts, tokens))


def distinct_groups(groups, top_k):
    """Expected distinct EP ranks a token's top-k experts land on (uniform routing):
    ep·(1 − (1 − 1/ep)^k), at most min(k, ep). Dispatch sends a token once per destination rank
    (DeepEP-style deduplication)."""
    g = np.maximum(np.asarray(groups, dtype=float), 1.0)
    return g * (1.0 - np.power(1.0 - 1.0 / g, top_k))


def moe_ops(model: ModelSpec, shape: Shape, layout: Layout, fmt: Formats, layers, imbalance=1.0,
            dispatch_bytes: float | None = None) -> list[Op]:
    """Router, routed experts as grouped GEMMs, shared experts, EP dispatch/combine, expert-TP reduce.

    Notes
    -----
    Tokens of the instance step (T) are spread over the tp ranks; each makes top_k expert
    assignments. An EP rank hosts ⌈E/ep⌉ expert slots (spares hold redundant copies), each expert
    split tp/ep ways (expert TP). Per device: assignments = T·k/ep·imbalance;
    FLOPs = 2·assignments·3·h·I_e/(tp/ep); weights read are the slots touched on this rank:
    ⌈E/ep⌉·(1−(1−k/E)^T)·3·h·I_e/(tp/ep)·bytes. Dispatch and combine are all-to-alls over the
    ep group of (T/tp)·g·h elements per rank, g = distinct destination ranks per token. The
    expert-TP shards each hold a partial sum of every token their EP group received, so the
    reduction (all-gather in + reduce-scatter out ≈ one all-reduce) carries those
    T·g/ep·imbalance tokens, not 1/tp of them: with ep = 1 it is all T tokens of the step.
    Around the grouped GEMMs run two memory-bound kernels over the same rows (TensorRT-LLM's
    CUTLASS MoE: expand-input-rows and finalize-routing): the permute reads the rank's tokens and
    writes one row per assignment, the finalize reads the assignments' 16-bit outputs and writes
    one sum per token. They are not elementwise epilogues, so fusion keeps them. Under expert TP
    (ep < tp) each rank permutes and finalizes k/ep of every token, not k/tp: with ep = 1 all
    T·k rows on every GPU, 8x an EP8 rank's (TRT-LLM tech blog 3: TP needs the MoE work for all
    tokens on every GPU). Only the rows beyond a rank's 1/tp share, a fraction 1 − ep/tp, are
    charged: the share itself is in the calibrated MoE efficiencies (``moe_kernel_efficiency``,
    ``gemm_m_half``), fitted on layouts whose ranks hold whole experts; charging it too moved the
    validated DeepSeek-R1 rows by −1 … −9 % (all rows 8.6 → 8.8 % median error, before a refit).
    At ep = tp (EP, or one GPU) both ops are empty and cost nothing.
    """
    moe = model.moe
    h, E, k, inter = model.hidden_size, moe.n_routed_experts, moe.top_k, moe.expert_intermediate_size
    T = shape.new_tokens
    t_rank = T / layout.tp
    assignments = T * k / layout.ep * imbalance
    slots = np.ceil(E / np.asarray(layout.ep, dtype=float) - 1e-9)
    experts_here = expected_experts_touched(E, k, T) / E * slots
    per_expert_m = assignments / np.maximum(experts_here, 1e-12)  # rows per touched expert on this rank
    mt = layout.moe_tp
    w_expert = 3.0 * h * inter / mt * fmt.wb
    a = layout.attn_tp
    t_attn = shape.attention_tokens(layout)
    g = np.minimum(distinct_groups(layout.ep, k), k)
    ops = [
        gemm("router", t_attn, E, h, layers, fmt, "moe"),
        gemm("experts_gate_up", assignments, 2 * inter / mt, h, layers, fmt, "moe",
             weight_bytes=experts_here * w_expert * (2 / 3), m_eff=per_expert_m, grouped=True),
        elementwise("experts_act", assignments * inter / mt, layers, "moe", passes=1.5),
        gemm("experts_down", assignments, h, inter / mt, layers, fmt, "moe",
             weight_bytes=experts_here * w_expert * (1 / 3), m_eff=per_expert_m, grouped=True),
    ]
    if moe.n_shared_experts:
        s_inter = moe.n_shared_experts * inter
        ops += [
            gemm("shared_gate_up", t_attn, 2 * s_inter / a, h, layers, fmt, "moe"),
            gemm("shared_down", t_attn, h, s_inter / a, layers, fmt, "moe"),
        ]
    disp = fmt.ab if dispatch_bytes is None else dispatch_bytes
    prompt_share = np.asarray(shape.prefill_tokens, dtype=float) / np.maximum(np.asarray(T, dtype=float), 1e-12)
    group_tokens = np.minimum(T * g / layout.ep * imbalance, T)
    # permute: the rank's tokens copied into expert-grouped rows (one row per assignment);
    # finalize: each token's k expert outputs (16 bit) weighted and summed back into token order.
    # Charged beyond an EP rank's own share (1 - ep/tp of the rows): that share is inside the
    # calibrated grouped-GEMM efficiency, fitted where ranks hold whole experts.
    if np.any(np.asarray(mt) > 1):  # nothing beyond the share where every rank holds whole experts
        moved = (1.0 - 1.0 / mt) * (group_tokens + assignments) * h  # elements read + written beyond it
        ops += [
            Op("experts_permute", OpKind.ELEMENTWISE, layers, bytes=moved * fmt.ab, block="moe"),
            Op("experts_finalize", OpKind.ELEMENTWISE, layers, bytes=moved * HIDDEN_BYTES, block="moe"),
        ]
    ops += [
        collective("moe_dispatch", Collective.ALL_TO_ALL, t_rank * g * h * disp, layout.ep, layers, "moe",
                   Fanout(t_rank * h * disp, k, moe.n_groups, moe.top_k_groups, prompt_share)),
        collective("moe_combine", Collective.ALL_TO_ALL, t_rank * g * h * HIDDEN_BYTES, layout.ep, layers, "moe",
                   Fanout(t_rank * h * HIDDEN_BYTES, k, moe.n_groups, moe.top_k_groups, prompt_share)),
        collective("moe_tp_all_reduce", Collective.ALL_REDUCE, group_tokens * h * HIDDEN_BYTES, mt, layers, "moe"),
    ]
    return ops


# ---- whole stage ----------------------------------------------------------------------------


def norm_ops(model, shape, layout, layers) -> list[Op]:
    t = shape.attention_tokens(layout)
    return [
        elementwise("input_norm", t * model.hidden_size, layers, "norm"),
        elementwise("post_attn_norm", t * model.hidden_size, layers, "norm"),
        elementwise("residual_add", t * model.hidden_size, 2 * layers, "norm", passes=1.5),
    ]


def head_ops(model: ModelSpec, shape: Shape, layout: Layout, fmt: Formats) -> list[Op]:
    """Embedding lookup, final norm, LM head (vocab split over attention TP) and sampling.

    Counted once per step and divided by pp as an average over stages.
    """
    a = layout.attn_tp
    t = shape.attention_tokens(layout)
    tl = shape.logit_tokens / layout.dp
    per_stage = 1.0 / layout.pp
    head = gemm("lm_head", tl, model.vocab_size / a, model.hidden_size, per_stage, fmt, "head",
                weight_bytes=model.vocab_size / a * model.hidden_size * HIDDEN_BYTES)
    return [
        elementwise("embedding", t * model.hidden_size, per_stage, "head", passes=1.0),
        elementwise("final_norm", tl * model.hidden_size, per_stage, "head"),
        head,
        elementwise("sampling", tl * model.vocab_size / a, per_stage, "head", passes=2.0),
        collective("pp_send", Collective.P2P, t * model.hidden_size * HIDDEN_BYTES,
                   np.minimum(layout.pp, 2), (layout.pp - 1) / layout.pp, "head"),
    ]


VISION_PATCH_PIXELS = 16 * 16
"""Pixels per vision-encoder patch (Qwen3-VL: 16x16 patches before the 2x2 merge)."""


FP8_VISION_ATTENTION_HEAD_ALIGN = 16
"""Head dimension multiple of the fp8 vision-encoder attention kernel: vLLM's fp8 ViT attention
(``VLLM_MM_ENCODER_FP8_ATTN``, FlashInfer's cuDNN prefill) needs head_dim a multiple of 16 and pads
Q/K/V up to it, e.g. Qwen3-VL's 72 to 80 (vllm-project/vllm
vllm/model_executor/models/vision.py ``get_fp8_padded_hidden_size``: "cuDNN FP8 prefill attention
requires head_dim to be a multiple of 16"; tests/kernels/attention, the FP8 ViT path "quantize ->
cuDNN -> un-pad", padded_dim = round_up(head_dim, 16))."""


def vision_attention_head_dim(head_dim: float, precision: str) -> float:
    """Head dimension the vision encoder's attention kernel computes on: padded up to
    ``FP8_VISION_ATTENTION_HEAD_ALIGN`` in fp8, the model's own in 16 bit."""
    if precision != "fp8":
        return float(head_dim)
    align = FP8_VISION_ATTENTION_HEAD_ALIGN
    return float(math.ceil(head_dim / align) * align)


def vision_ops(model: ModelSpec, shape: Shape, layout: Layout, fmt: Formats) -> list[Op]:
    """Vision encoder for the step's prompts (ViT over each image's patches), once per step.

    Notes
    -----
    Per prompt with P patches: the transformer blocks (fused QKV + output 4·h², MLP 2·h·I per
    layer) run on all P patches; the remaining parameters (patch-merger MLPs, incl. DeepStack's)
    run on the merged tokens, P / (pixels_per_token / patch pixels). Attention is full within an
    image: 4·P²·h FLOPs per layer, costed as an attention kernel; over a mix of image sizes that
    is 4·E[P²]·h, so a few large images weigh far more than their share of patches, computed in
    ``fmt.vision_attention`` (16 bit by default), with one softmax exponential per patch pair per
    head (4·h/heads FLOPs per exp); in fp8 the kernel works on heads padded to a multiple of 16
    (``vision_attention_head_dim``: Qwen3-VL's 72 as 80), which the tensor FLOPs and the Q/K/V/O
    bytes carry, the exponentials not. 16-bit weights are read once per step. Runs on
    the attention ranks (data parallel under attention DP); averaged over pipeline stages like
    the head. Within an attention rank's tensor-parallel group the encoder is sharded like the
    language model (vLLM's default ``mm_encoder_tp_mode`` 'weights': the blocks' and mergers'
    linear layers are column/row parallel, the heads split over the ranks; vllm-project/vllm
    vllm/model_executor/models/qwen3_vl.py, Qwen3_VisionBlock / Qwen3_VisionMLP), with an
    all-reduce of the patches' hidden states after each block's attention and MLP.
    """
    v = model.vision_encoder
    a = layout.attn_tp
    prompts = shape.prefill_seqs / layout.dp
    patches = prompts * shape.prefill_patches
    per_prompt = shape.prefill_patches
    patches_sq = per_prompt ** 2 if shape.prefill_patches_sq is None else shape.prefill_patches_sq
    block_params = v.n_layers * (4.0 * v.hidden_size ** 2 + 2.0 * v.hidden_size * v.intermediate_size)
    merger_params = max(v.params_b * 1e9 - block_params, 0.0)
    merge = v.pixels_per_token / VISION_PATCH_PIXELS
    linear = (2.0 * block_params * patches + 2.0 * merger_params * patches / merge) / a
    scores = prompts * patches_sq * v.n_heads * v.n_layers / a
    head_dim = v.hidden_size / v.n_heads
    pad = vision_attention_head_dim(head_dim, fmt.vision_attention) / head_dim
    attn = 4.0 * scores * head_dim * pad
    weights = np.where(np.asarray(patches) > 0, v.params_b * 1e9 * HIDDEN_BYTES / a, 0.0)
    act = patches * (v.hidden_size * 6 + v.intermediate_size * 2) * HIDDEN_BYTES * v.n_layers / a
    qkvo = patches * 4.0 * v.hidden_size * HIDDEN_BYTES * v.n_layers / a * pad
    return [Op("vision_encoder", OpKind.GEMM, 1.0 / layout.pp, flops=linear, bytes=weights + act, precision="bf16",
               m=np.maximum(per_prompt, 1.0), block="vision"),
            Op("vision_attention", OpKind.ATTENTION, 1.0 / layout.pp, flops=attn, bytes=qkvo, precision=fmt.vision_attention,
               block="vision", exps=scores),
            collective("vision_all_reduce", Collective.ALL_REDUCE, patches * v.hidden_size * HIDDEN_BYTES, a,
                       2.0 * v.n_layers / layout.pp, "vision")]


def build_graph(model: ModelSpec, shape: Shape, layout: Layout, fmt: Formats, *, moe_imbalance=1.0,
                dispatch_bytes: float | None = None, phase: str = "mixed") -> OpGraph:
    """Operators of one pipeline stage's step on one device.

    ``shape`` is the micro-batch one stage processes (already divided by pp when pipelining).
    Layer counts are per stage: layers / pp.
    """
    per_stage = 1.0 / layout.pp
    ops: list[Op] = []
    ops += norm_ops(model, shape, layout, model.n_layers * per_stage)
    ops += attention_ops(model, shape, layout, fmt, model.n_layers * per_stage)
    if model.n_dense_layers:
        ops += dense_mlp_ops(model, shape, layout, fmt, model.n_dense_layers * per_stage)
    if model.n_moe_layers:
        ops += moe_ops(model, shape, layout, fmt, model.n_moe_layers * per_stage, moe_imbalance, dispatch_bytes)
    ops += head_ops(model, shape, layout, fmt)
    if model.vision_encoder is not None:
        ops += vision_ops(model, shape, layout, fmt)
    return OpGraph(tuple(ops), phase=phase)


def narrowest_supported(hw, candidates=("fp4", "fp8", "bf16")) -> str:
    """Narrowest precision in ``candidates`` with a native rate on ``hw``."""
    for p in candidates:
        if hw.compute.supports(p):
            return p
    return "bf16"


def resolve_formats(precision_spec, hw, recipe=None) -> Formats:
    """Turn a scenario's PrecisionSpec ('auto' allowed) into concrete formats for ``hw``.

    ``recipe`` (``presets.Recipe``, optional): a published run's checkpoint formats, used for the
    fields the scenario leaves 'auto' (an explicit scenario format wins) where ``hw`` runs them
    natively (a recipe written for other hardware falls back to 'auto')."""
    def from_recipe(value, name):
        r = None if recipe is None else getattr(recipe, name)
        return r if value == "auto" and r is not None and hw.compute.supports(r) else value

    mix = None if recipe is None else recipe.weight_mix
    if precision_spec.weights != "auto" or precision_spec.activations != "auto" or (
            mix is not None and not all(hw.compute.supports(p) for p, _ in mix)):
        mix = None  # an explicit scenario format wins; a recipe for other hardware falls back to 'auto'
    w = from_recipe(precision_spec.weights, "weights")
    w = narrowest_supported(hw) if w == "auto" else w
    if mix is not None:
        w = max(mix, key=lambda ps: ps[1])[0]
    act = precision_spec.activations
    act = w if act == "auto" else act
    kv = from_recipe(precision_spec.kv_cache, "kv_cache")
    kv = narrowest_supported(hw, ("fp8", "bf16")) if kv == "auto" else kv
    va = from_recipe("auto", "vision_attention")
    va = "bf16" if va == "auto" else va
    for p in (w, act, kv, va):
        assert p in PRECISIONS
    return Formats(weights=w, activations=act, kv_cache=kv, vision_attention=va,
                   weight_mix=None if mix is None else tuple(mix))
