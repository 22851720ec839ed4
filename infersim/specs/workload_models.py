"""Profiles of non-LLM workloads: a video diffusion transformer and a generative recommender.

Model YAMLs declare their ``kind`` (``diffusion_video`` or ``generative_recommender``); the LLM
``ModelSpec`` has no ``kind`` field, so the key alone tells the two families apart. Scenario
YAMLs for these workloads carry a ``workload.kind`` (``text_to_video`` or ``recommendation``)
and an MLPerf scenario ``kind`` (``offline``, ``singlestream``, ``server``).

Every architecture number in a bundled profile names its source in the profile's ``source``.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal, Union

from pydantic import Field, PositiveFloat, PositiveInt, RootModel, model_validator

from ..units import BYTES_PER_ELEMENT
from ._base import Spec
from .hardware import Precision
from .scenario import ScenarioHeader

Dim = Annotated[int, Field(gt=0, le=10_000_000)]

MODEL_KINDS: tuple[str, ...] = ("diffusion_video", "generative_recommender")
"""Values of a model YAML's ``kind`` handled by ``infersim.workloads``."""

WORKLOAD_KINDS: tuple[str, ...] = ("text_to_video", "recommendation")
"""Values of a scenario YAML's ``workload.kind`` handled by ``infersim.workloads``."""


# ---- text-to-video diffusion ------------------------------------------------------------------


class DiTSpec(Spec):
    """One diffusion-transformer expert: blocks of self-attention, cross-attention to the text and
    a GELU MLP over the patchified latent tokens (Wan2.x layout)."""

    n_layers: Dim
    """Transformer blocks."""
    hidden_size: Dim
    """Token width."""
    ffn_size: Dim
    """MLP intermediate width (two matrices: up and down)."""
    n_heads: Dim
    """Attention heads (self and cross attention)."""
    head_dim: Dim
    """Width per head."""
    text_dim: Dim
    """Width of the text-encoder output fed to the cross-attention (projected to hidden_size)."""
    patch_size: Annotated[tuple[PositiveInt, PositiveInt, PositiveInt], Field(strict=False)]
    """Latent patch (frames, height, width) merged into one token."""
    latent_channels: Dim
    """Channels of the VAE latent the transformer denoises."""
    n_experts: PositiveInt = 1
    """Separate transformer checkpoints used at different noise levels (Wan2.2 A14B: 2, high- and
    low-noise); exactly one runs per denoising step."""
    boundary_ratio: float = Field(default=1.0, gt=0, le=1)
    """Fraction of the noise schedule (from pure noise) handled by the high-noise expert."""

    @model_validator(mode="after")
    def _check(self):
        if self.n_heads * self.head_dim != self.hidden_size:
            raise ValueError(f"n_heads x head_dim ({self.n_heads * self.head_dim}) must equal hidden_size ({self.hidden_size})")
        return self

    @property
    def params_per_token_block(self) -> float:
        """Weights one latent token passes through in one block: self-attention Q,K,V,O, the
        cross-attention Q and O, and the two MLP matrices."""
        h = self.hidden_size
        return 4.0 * h * h + 2.0 * h * h + 2.0 * h * self.ffn_size

    @property
    def params_per_expert(self) -> float:
        """Block weights of one expert incl. the cross-attention K/V over the text (embeddings,
        modulation vectors and the patch/text/time embedders excluded: < 1 %)."""
        h = self.hidden_size
        return self.n_layers * (self.params_per_token_block + 2.0 * h * h)


class TextEncoderSpec(Spec):
    """Encoder-only text transformer (umT5-XXL for Wan2.x)."""

    n_layers: Dim
    hidden_size: Dim
    ffn_size: Dim
    """Gated-GELU MLP width (three matrices)."""
    n_heads: Dim
    head_dim: Dim
    vocab_size: Dim
    max_tokens: Dim
    """Prompt length the encoder runs on (prompts are padded to it), tokens."""

    @property
    def params(self) -> float:
        h, a = self.hidden_size, self.n_heads * self.head_dim
        return self.n_layers * (4.0 * h * a + 3.0 * h * self.ffn_size) + self.vocab_size * h


class VaeDecoderSpec(Spec):
    """3-D causal convolutional VAE decoder (Wan2.1 VAE): per level, residual blocks of two
    3x3x3 convolutions, then an up-sampling to the next level."""

    base_channels: Dim
    """Channels of the full-resolution level."""
    channel_multipliers: list[PositiveInt] = Field(min_length=1, max_length=8)
    """Channel multiplier per level, full resolution first (the decoder runs them in reverse)."""
    res_blocks_per_level: PositiveInt = Field(le=16)
    """Residual blocks per encoder level (the decoder runs one more per level)."""
    kernel: PositiveInt = Field(default=3, le=7)
    """Convolution kernel edge (cubic kernel)."""
    temporal_stride: PositiveInt
    """Frames per latent frame (after the first)."""
    spatial_stride: PositiveInt
    """Pixels per latent pixel along each image axis."""


class DiffusionVideoModelSpec(Spec):
    """A text-to-video latent diffusion model: text encoder, denoising transformer(s), VAE decoder."""

    kind: Literal["diffusion_video"]
    name: str
    hf_repo: str | None = None
    source: list[str] = Field(min_length=1)
    """Where every number in this file comes from."""
    transformer: DiTSpec
    text_encoder: TextEncoderSpec
    vae_decoder: VaeDecoderSpec
    native_precision: Precision = "bf16"
    """Precision of the released weights."""
    notes: list[str] = Field(default_factory=list)

    @cached_property
    def weight_params(self) -> float:
        """Parameters resident on a GPU that generates a whole video (all experts + text encoder)."""
        return self.transformer.n_experts * self.transformer.params_per_expert + self.text_encoder.params


# ---- generative recommender -------------------------------------------------------------------


class EmbeddingTableSpec(Spec):
    """One sparse embedding table."""

    name: str
    rows: Annotated[float, Field(gt=0, le=1e13)]
    """Rows (hashed ids)."""
    dim: Dim
    """Embedding width."""
    precision: Precision = "fp16"
    """Storage format of the rows."""
    lookups: Literal["sequence", "candidates", "sequence_and_candidates", "once"]
    """Which tokens look this table up: every history item, every candidate, both, or once per
    request (contextual features such as the user id)."""

    @property
    def bytes(self) -> float:
        return self.rows * self.dim * BYTES_PER_ELEMENT[self.precision]

    @property
    def row_bytes(self) -> float:
        return self.dim * BYTES_PER_ELEMENT[self.precision]


class HstuSpec(Spec):
    """Sequential transduction units (HSTU): per layer a fused U,V,Q,K projection, pointwise
    (SiLU) causal target-aware attention and an output projection of [u * norm(attn), u, x]."""

    n_layers: Dim
    n_heads: Dim
    qk_dim: Dim
    """Query/key width per head."""
    linear_dim: Dim
    """Value/U width per head."""
    embedding_dim: Dim
    """Token width between layers."""
    preprocessor_hidden_dim: Dim
    """Hidden width of the per-token input MLP of the contextual preprocessor."""
    preprocessor_input_dim: Dim
    """Input width of that MLP (concatenated per-token embeddings)."""
    max_seq_len: Dim
    """Longest sequence (contextual + history + candidates) the model accepts, tokens."""

    @property
    def params_per_layer(self) -> float:
        uvqk = self.embedding_dim * (2 * self.linear_dim + 2 * self.qk_dim) * self.n_heads
        out = 3 * self.linear_dim * self.n_heads * self.embedding_dim
        return float(uvqk + out)


class GenerativeRecommenderSpec(Spec):
    """A generative recommender (Meta HSTU / DLRMv3): embedding lookups, then an HSTU stack over
    the user's interaction history with the candidates appended, scored per candidate."""

    kind: Literal["generative_recommender"]
    name: str
    source: list[str] = Field(min_length=1)
    tables: list[EmbeddingTableSpec] = Field(min_length=1)
    hstu: HstuSpec
    candidate_mlp_layers: list[Annotated[tuple[Dim, Dim], Field(strict=False)]] = Field(default_factory=list, max_length=64)
    """(input width, output width) of each dense layer a candidate passes through outside the
    HSTU stack (item-embedding MLP and task head)."""
    dense_precision: Precision = "fp16"
    """Precision of the dense (HSTU) computation."""
    notes: list[str] = Field(default_factory=list)

    @property
    def candidate_mlp_params(self) -> float:
        return float(sum(i * o for i, o in self.candidate_mlp_layers))

    @property
    def table_bytes(self) -> float:
        return float(sum(t.bytes for t in self.tables))


NonLlmModelSpec = Annotated[Union[DiffusionVideoModelSpec, GenerativeRecommenderSpec], Field(discriminator="kind")]


class NonLlmModelFile(RootModel[NonLlmModelSpec]):
    """A non-LLM model YAML document (dispatched on ``kind``)."""


# ---- scenarios ---------------------------------------------------------------------------------


class TextToVideoWorkload(Spec):
    """One generated video per sample."""

    kind: Literal["text_to_video"]
    width_px: Dim
    height_px: Dim
    frames: Dim
    """Output frames per video."""
    denoising_steps: Dim
    """Sampler steps; each runs the transformer once per guidance branch."""
    guidance_branches: Literal[1, 2] = 2
    """2 with classifier-free guidance (conditional + unconditional pass per step)."""
    prompts_encoded: PositiveInt = Field(default=2, le=8)
    """Text-encoder passes per sample (prompt and negative prompt)."""


class RecommendationWorkload(Spec):
    """One ranking request per sample: a user's interaction history plus candidates to score."""

    kind: Literal["recommendation"]
    history_tokens: Annotated[float, Field(gt=0, le=1e7)]
    """Mean user-interaction-history length at inference, items (after truncation)."""
    history_tokens_estimate: bool = False
    """True when history_tokens is derived rather than measured."""
    candidates: Dim
    """Candidates scored per request."""
    contextual_tokens: PositiveInt = 1
    """Contextual tokens prepended to the sequence (user id)."""


class NonLlmSlo(Spec):
    """Latency limit at a percentile (MLPerf Server: p99 of the whole query)."""

    latency_ms: PositiveFloat = Field(le=1e9)
    percentile: float = Field(default=99.0, gt=0, lt=100)


class NonLlmScenarioSpec(ScenarioHeader):
    """An MLPerf scenario for a non-LLM workload."""

    kind: Literal["offline", "singlestream", "server"]
    """offline: throughput (samples/s); singlestream: one query at a time, latency at
    ``latency_percentile``; server: Poisson arrivals, throughput within ``slo``."""
    workload: Annotated[Union[TextToVideoWorkload, RecommendationWorkload], Field(discriminator="kind")]
    precision: Precision = "fp8"
    """Format of the transformer GEMMs and attention (the submission's declared/used format)."""
    slo: NonLlmSlo | None = None
    latency_percentile: float = Field(default=90.0, gt=0, lt=100)
    """SingleStream metric percentile (MLPerf: p90)."""

    @model_validator(mode="after")
    def _check(self):
        if self.kind == "server" and self.slo is None:
            raise ValueError("slo: a server scenario needs a latency limit")
        return self


def is_non_llm_model(data) -> bool:
    """True when parsed model YAML declares a non-LLM ``kind``."""
    return isinstance(data, dict) and data.get("kind") in MODEL_KINDS


def is_non_llm_scenario(data) -> bool:
    """True when parsed scenario YAML has a non-LLM ``workload.kind``."""
    return isinstance(data, dict) and isinstance(data.get("workload"), dict) and data["workload"].get("kind") in WORKLOAD_KINDS
