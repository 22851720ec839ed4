"""Model profile: the architecture quantities that FLOPs and bytes depend on.

Attention is a discriminated union (``mha`` / ``gqa`` / ``mla``); MoE is optional. Parameter
counts, weight bytes and KV-cache bytes are derived here once and used everywhere else.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import Field, model_validator

from ..units import BYTES_PER_ELEMENT
from ._base import Spec
from .hardware import Precision

Dim = Annotated[int, Field(gt=0, le=10_000_000)]
"""A positive size or count: at most 1e7."""
Count = Annotated[int, Field(ge=0, le=10_000_000)]
"""A non-negative count: at most 1e7."""
Billions = Annotated[float, Field(gt=0, le=1e6)]
"""A parameter count in billions: positive, at most 1e6 (10^15 parameters)."""


class GqaAttention(Spec):
    """Multi-head / grouped-query attention (``mha`` when n_kv_heads == n_heads)."""

    kind: Literal["gqa", "mha"]
    n_heads: Dim
    """Query heads."""
    n_kv_heads: Dim
    """Key/value heads."""
    head_dim: Dim
    """Dimension per head."""
    qkv_bias: bool = False
    """Bias on the Q/K/V (and O) projections (gpt-oss)."""
    qk_norm: bool = False
    """RMSNorm on queries and keys (Qwen3)."""
    sliding_window_tokens: Dim | None = None
    """Window of the sliding-window layers, tokens (null = all layers full attention)."""
    n_sliding_layers: Count = 0
    """Number of layers using the sliding window (the rest attend to the full context)."""

    @model_validator(mode="after")
    def _check(self):
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
        if self.kind == "mha" and self.n_kv_heads != self.n_heads:
            raise ValueError("kind 'mha' needs n_kv_heads == n_heads (use 'gqa' otherwise)")
        if (self.n_sliding_layers > 0) != (self.sliding_window_tokens is not None):
            raise ValueError("sliding_window_tokens and n_sliding_layers > 0 go together")
        return self

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    def params_per_layer(self, hidden: int) -> float:
        """Q, K, V, O projection weights (+ biases) of one layer."""
        qkv = hidden * (self.q_width + 2 * self.kv_width)
        out = self.q_width * hidden
        bias = (self.q_width + 2 * self.kv_width + hidden) if self.qkv_bias else 0
        return float(qkv + out + bias)

    def kv_elements_per_token_layer(self) -> int:
        """K and V elements cached per token per layer."""
        return 2 * self.kv_width


class MlaAttention(Spec):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi K2): a compressed KV latent is cached."""

    kind: Literal["mla"]
    n_heads: Dim
    """Query heads."""
    q_lora_rank: Dim | None
    """Rank of the query down-projection (null = full-rank queries)."""
    kv_lora_rank: Dim
    """Rank of the KV latent (cached)."""
    qk_rope_head_dim: Dim
    """Decoupled RoPE key dimension (cached, shared across heads)."""
    qk_nope_head_dim: Dim
    """Non-RoPE query/key dimension per head."""
    v_head_dim: Dim
    """Value dimension per head."""

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def params_per_layer(self, hidden: int) -> float:
        """q_a/q_b (or q), kv_a (latent + rope key), kv_b (up-projection to K_nope and V), o."""
        h, H = hidden, self.n_heads
        if self.q_lora_rank:
            q = h * self.q_lora_rank + self.q_lora_rank * H * self.qk_head_dim
        else:
            q = h * H * self.qk_head_dim
        kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_b = self.kv_lora_rank * H * (self.qk_nope_head_dim + self.v_head_dim)
        out = H * self.v_head_dim * h
        return float(q + kv_a + kv_b + out)

    def kv_elements_per_token_layer(self) -> int:
        """Latent plus RoPE key elements cached per token per layer (shared by all heads)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


Attention = Annotated[Union[GqaAttention, MlaAttention], Field(discriminator="kind")]


class MoeSpec(Spec):
    """Mixture-of-experts feed-forward."""

    n_routed_experts: Dim
    """Routed experts per MoE layer."""
    n_shared_experts: Count = 0
    """Always-active shared experts per MoE layer."""
    top_k: Dim
    """Routed experts chosen per token."""
    expert_intermediate_size: Dim
    """Gated-MLP intermediate width of one expert."""
    n_dense_leading_layers: Count = 0
    """Leading layers that use a dense MLP instead of MoE (DeepSeek: 3)."""
    n_groups: Dim | None = None
    """Expert groups of group-limited routing (config ``n_group``; DeepSeek-V3/R1: 8). Unset: a
    token may pick any experts."""
    top_k_groups: Dim | None = None
    """Groups a token's experts may come from (config ``topk_group``; DeepSeek-V3/R1: 4). With the
    groups laid out on scale-up domains, a token's dispatch leaves its domain for at most this many
    (DeepSeek-V3 technical report, node-limited routing)."""

    @model_validator(mode="after")
    def _check(self):
        if self.top_k > self.n_routed_experts:
            raise ValueError(f"top_k ({self.top_k}) exceeds n_routed_experts ({self.n_routed_experts})")
        if (self.n_groups is None) != (self.top_k_groups is None):
            raise ValueError("n_groups and top_k_groups go together: set both (group-limited routing) or neither")
        if self.n_groups is not None:
            if self.n_routed_experts % self.n_groups:
                raise ValueError(f"n_groups ({self.n_groups}) must divide n_routed_experts ({self.n_routed_experts})")
            if self.top_k_groups > self.n_groups:
                raise ValueError(f"top_k_groups ({self.top_k_groups}) exceeds n_groups ({self.n_groups})")
        return self


class VisionEncoderSpec(Spec):
    """Vision encoder run once per image (Qwen3-VL)."""

    n_layers: Dim
    hidden_size: Dim
    intermediate_size: Dim
    n_heads: Dim
    params_b: Billions
    """Parameter count, billions (estimate from the config where marked)."""
    pixels_per_token: Dim
    """Image pixels per LM token after patch merging (e.g. 32*32 = 1024)."""


class PublishedCounts(Spec):
    """Parameter counts as published by the model's authors (for checks, not for costing)."""

    total_params_b: Billions | None = None
    """Total parameters, billions (official figure)."""
    active_params_b: Billions | None = None
    """Active parameters per token, billions (official figure)."""
    computed_total_params_b: Billions | None = None
    """Total recomputed from the config by the reference notes, billions."""
    computed_active_params_b: Billions | None = None
    """Active recomputed from the config by the reference notes, billions."""
    note: str | None = None


class ModelSpec(Spec):
    """A decoder-only LLM (optionally MoE, optionally multimodal)."""

    name: str
    """Human-readable name."""
    hf_repo: str | None = None
    """Hugging Face repository the config comes from."""
    source: list[str] = Field(min_length=1)
    """Where every number in this file comes from."""
    n_layers: Dim
    """Transformer layers (MTP modules excluded)."""
    hidden_size: Dim
    """Residual stream width."""
    intermediate_size: Dim | None = None
    """Dense gated-MLP intermediate width (required when any layer is dense)."""
    vocab_size: Dim
    """Vocabulary size."""
    tie_word_embeddings: bool = False
    """True when the LM head shares the embedding matrix."""
    attention: Attention
    moe: MoeSpec | None = None
    """Mixture-of-experts block (null for dense models)."""
    mtp_layers: int = Field(default=0, ge=0, le=64)
    """Multi-token-prediction modules shipped with the model (DeepSeek-V3/R1: 1)."""
    native_precision: Precision
    """Precision of the released linear weights."""
    max_context_tokens: Dim
    """Maximum supported context, tokens; a workload whose input plus output can exceed it is
    rejected."""
    vision_encoder: VisionEncoderSpec | None = None
    published: PublishedCounts = PublishedCounts()
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self):
        if self.n_dense_layers > 0 and self.intermediate_size is None:
            raise ValueError("intermediate_size is required when the model has dense MLP layers")
        if self.moe and self.moe.n_dense_leading_layers > self.n_layers:
            raise ValueError("moe.n_dense_leading_layers exceeds n_layers")
        att = self.attention
        if isinstance(att, GqaAttention) and att.n_sliding_layers > self.n_layers:
            raise ValueError("attention.n_sliding_layers exceeds n_layers")
        return self

    # ---- layer counts -------------------------------------------------------------------
    @property
    def n_moe_layers(self) -> int:
        return 0 if self.moe is None else self.n_layers - self.moe.n_dense_leading_layers

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def is_mla(self) -> bool:
        return isinstance(self.attention, MlaAttention)

    # ---- parameters ---------------------------------------------------------------------
    @cached_property
    def attention_params_per_layer(self) -> float:
        return self.attention.params_per_layer(self.hidden_size)

    @cached_property
    def dense_mlp_params_per_layer(self) -> float:
        """Gated MLP (gate, up, down) of one dense layer."""
        return 3.0 * self.hidden_size * (self.intermediate_size or 0)

    @cached_property
    def expert_params(self) -> float:
        """One expert's gated MLP."""
        return 0.0 if self.moe is None else 3.0 * self.hidden_size * self.moe.expert_intermediate_size

    @cached_property
    def router_params_per_layer(self) -> float:
        return 0.0 if self.moe is None else float(self.hidden_size * self.moe.n_routed_experts)

    @cached_property
    def embedding_params(self) -> float:
        return float(self.vocab_size * self.hidden_size)

    @cached_property
    def lm_head_params(self) -> float:
        return 0.0 if self.tie_word_embeddings else self.embedding_params

    @cached_property
    def routed_expert_params(self) -> float:
        """All routed experts of all MoE layers (what expert parallelism shards)."""
        return 0.0 if self.moe is None else self.n_moe_layers * self.moe.n_routed_experts * self.expert_params

    @cached_property
    def linear_params_non_expert(self) -> float:
        """Attention, dense MLP, shared experts and routers of all layers (no embeddings)."""
        shared = 0.0 if self.moe is None else self.moe.n_shared_experts * self.expert_params
        return (
            self.n_layers * self.attention_params_per_layer
            + self.n_dense_layers * self.dense_mlp_params_per_layer
            + self.n_moe_layers * (shared + self.router_params_per_layer)
        )

    @cached_property
    def total_params(self) -> float:
        """All parameters of the language model incl. embeddings and LM head (MTP and vision excluded)."""
        return self.linear_params_non_expert + self.routed_expert_params + self.embedding_params + self.lm_head_params

    @cached_property
    def active_params(self) -> float:
        """Parameters used per token: as total, but only top_k routed experts per MoE layer."""
        routed_active = 0.0 if self.moe is None else self.n_moe_layers * self.moe.top_k * self.expert_params
        return self.linear_params_non_expert + routed_active + self.embedding_params + self.lm_head_params

    # ---- bytes --------------------------------------------------------------------------
    def weight_bytes(self, precision: str, embedding_precision: str = "bf16") -> float:
        """Bytes of all weights with linear layers in ``precision`` and embeddings/LM head in
        ``embedding_precision`` (quantized checkpoints keep those in 16 bit)."""
        linear = self.linear_params_non_expert + self.routed_expert_params
        emb = self.embedding_params + self.lm_head_params
        return linear * BYTES_PER_ELEMENT[precision] + emb * BYTES_PER_ELEMENT[embedding_precision]

    @property
    def n_full_attention_layers(self) -> int:
        att = self.attention
        return self.n_layers - (att.n_sliding_layers if isinstance(att, GqaAttention) else 0)

    def kv_bytes_per_token(self, precision: str) -> float:
        """KV-cache bytes per context token for the full-attention layers, whole model, unsharded.

        Sliding-window layers add ``sliding_kv_bytes_per_token`` for at most the window's tokens.
        """
        return self.n_full_attention_layers * self.attention.kv_elements_per_token_layer() * BYTES_PER_ELEMENT[precision]

    def sliding_kv_bytes_per_token(self, precision: str) -> float:
        """KV bytes per token across the sliding-window layers (held for at most the window)."""
        att = self.attention
        if not isinstance(att, GqaAttention) or att.n_sliding_layers == 0:
            return 0.0
        return att.n_sliding_layers * att.kv_elements_per_token_layer() * BYTES_PER_ELEMENT[precision]

    def kv_cache_bytes(self, context_len, precision: str):
        """KV-cache bytes for one sequence of ``context_len`` tokens (broadcastable), unsharded."""
        att = self.attention
        window = att.sliding_window_tokens if isinstance(att, GqaAttention) else None
        full = context_len * self.kv_bytes_per_token(precision)
        if window is None:
            return full
        return full + np.minimum(context_len, window) * self.sliding_kv_bytes_per_token(precision)
