"""Text-to-video diffusion (WAN-2.2-T2V-A14B): text encoder, denoising transformer, VAE decoder.

One video is ``denoising_steps`` × ``guidance_branches`` forward passes of the diffusion
transformer over all latent tokens (frames × height × width after the VAE's compression and the
transformer's patching), bracketed by the text encoder (prompt and negative prompt) and the VAE
decoder. The two experts of WAN-2.2 (high-noise, low-noise) never run together: each step uses
one of them, so they change the resident weights, not the work per step.

Parallel layouts of one video over g = ulysses × cfg accelerators:
- Ulysses sequence parallelism (``ulysses``): each rank holds 1/u of the tokens for the GEMMs and
  1/u of the heads over the whole sequence for attention; four all-to-alls per block (Q, K, V in,
  output back). Weights are replicated. ``ulysses`` must divide the head count.
- CFG parallelism (``cfg``): the conditional and unconditional passes run on different ranks; the
  noise predictions are exchanged once per step.
Offline runs ``accelerators // g`` videos side by side; SingleStream uses every accelerator for
one video. The layout is searched (throughput for Offline, latency for SingleStream).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..graph import Collective
from ..specs.hardware import HardwareSpec
from ..specs.workload_models import DiffusionVideoModelSpec, TextToVideoWorkload
from ..units import BYTES_PER_ELEMENT, GIB, MS
from .cost import Coster, StageCost

HIDDEN_BYTES = 2.0
"""Activations between kernels are 16 bit."""

ELEMENTWISE_HIDDEN_PASSES = 14.0
"""Read+write passes over the hidden state per block outside GEMMs and attention: three
LayerNorm+modulation, Q/K RMSNorm and 3-D RoPE, three gated residual adds (Wan2.x block
structure, Wan-Video/Wan2.2 wan/modules/model.py); the GELU adds one pass over the MLP width."""

VAE_PARAMS = 0.13e9
"""Wan2.1 VAE parameters (encoder + decoder, ~127M per the Wan2.1 README); resident only."""

ACTIVATION_WIDTHS = 6.0
"""Hidden-size-wide activation buffers alive at once per token in a block (input, normed, Q, K,
V, attention output), plus one MLP-wide buffer; sizes the activation memory."""


@dataclass(frozen=True)
class VideoShape:
    latent_frames: int
    latent_height: int
    latent_width: int
    tokens: int
    text_tokens: int


def video_shape(model: DiffusionVideoModelSpec, wl: TextToVideoWorkload) -> VideoShape:
    """Latent and token counts of one video: the VAE keeps the first frame and compresses the
    rest by ``temporal_stride``, each image axis by ``spatial_stride``; the transformer merges
    ``patch_size`` latent cells into one token (81 frames of 1280x720 → 21x90x160 → 75,600)."""
    v, p = model.vae_decoder, model.transformer.patch_size
    lf = 1 + (wl.frames - 1) // v.temporal_stride
    lh, lw = wl.height_px // v.spatial_stride, wl.width_px // v.spatial_stride
    tokens = math.ceil(lf / p[0]) * (lh // p[1]) * (lw // p[2])
    return VideoShape(lf, lh, lw, tokens, model.text_encoder.max_tokens)


def dit_forward(model: DiffusionVideoModelSpec, shape: VideoShape, hw: HardwareSpec, precision: str, u) -> StageCost:
    """One transformer forward over the whole latent on a Ulysses group of ``u`` (array) ranks:
    time on one rank."""
    d = model.transformer
    h, S, T, L = d.hidden_size, float(shape.tokens), float(shape.text_tokens), d.n_layers
    s = S / np.asarray(u, dtype=float)
    b = BYTES_PER_ELEMENT[precision]
    c = Coster(hw)
    c.gemm(s, 3 * h, h, precision, L)            # self-attention Q, K, V
    c.gemm(s, h, h, precision, L)                # self-attention output
    c.gemm(s, h, h, precision, 2 * L)            # cross-attention Q and output
    c.gemm(T, 2 * h, h, precision, L)            # cross-attention K, V over the text tokens
    c.gemm(s, d.ffn_size, h, precision, L)       # MLP up
    c.gemm(s, h, d.ffn_size, precision, L)       # MLP down
    heads_per_rank = d.n_heads / np.asarray(u, dtype=float)
    width = heads_per_rank * d.head_dim
    # one softmax exponential per score element and head: S·S per head on the rank's heads, s·T
    # per head over all heads in the cross-attention
    c.attention(4.0 * S * S * width, 4.0 * S * width * b, precision, L, sfu_ops=S * S * heads_per_rank)
    c.attention(4.0 * s * T * h, (2.0 * s + 2.0 * T) * h * b, precision, L, sfu_ops=s * T * d.n_heads)
    c.elementwise((ELEMENTWISE_HIDDEN_PASSES * h + 2.0 * d.ffn_size) * s * HIDDEN_BYTES, L)
    c.collective(Collective.ALL_TO_ALL, s * h * b, u, 4 * L)                    # Ulysses Q, K, V, O
    return c.finish()


def text_encoder(model: DiffusionVideoModelSpec, shape: VideoShape, hw: HardwareSpec, passes: int) -> StageCost:
    """Encoder-only T5 over the padded prompt, ``passes`` times, 16 bit, on one rank."""
    t = model.text_encoder
    T, h, a = float(shape.text_tokens), t.hidden_size, t.n_heads * t.head_dim
    c = Coster(hw)
    c.gemm(T, 3 * a, h, "bf16", t.n_layers * passes)
    c.gemm(T, h, a, "bf16", t.n_layers * passes)
    c.gemm(T, 2 * t.ffn_size, h, "bf16", t.n_layers * passes)
    c.gemm(T, h, t.ffn_size, "bf16", t.n_layers * passes)
    c.attention(4.0 * T * T * a, 4.0 * T * a * HIDDEN_BYTES, "bf16", t.n_layers * passes, sfu_ops=T * T * t.n_heads)
    return c.finish()


def vae_decode(model: DiffusionVideoModelSpec, shape: VideoShape, hw: HardwareSpec) -> StageCost:
    """3-D convolutional decoder from the latent to the frames, 16 bit, on one rank.

    Notes
    -----
    Level i (deepest first) has channels base × multiplier (reversed list) and runs
    res_blocks + 1 residual blocks of two k³ convolutions; the deepest level adds the middle
    block (two residual blocks); each later level starts with one up-sampling convolution at its
    own resolution. Up-sampling doubles both image axes per level and the frames on the first
    log2(temporal_stride) levels. A convolution is an implicit GEMM: 2·k³·C_in·C_out FLOPs per
    output voxel (C_in = C_out = the level's channels, an approximation of the channel changes at
    level boundaries).
    """
    v = model.vae_decoder
    mults = list(reversed(v.channel_multipliers))
    t_ups = int(round(math.log2(v.temporal_stride)))
    c = Coster(hw)
    frames, hgt, wid = shape.latent_frames, shape.latent_height, shape.latent_width
    taps = v.kernel ** 3
    for i, mult in enumerate(mults):
        ch = v.base_channels * mult
        if i > 0:
            hgt, wid = 2 * hgt, 2 * wid
            if i <= t_ups:
                frames = 1 + (frames - 1) * 2
        voxels = float(frames * hgt * wid)
        convs = 2 * (v.res_blocks_per_level + 1) + (4 if i == 0 else 1)
        c.gemm(voxels, ch, taps * ch, "bf16", convs, weight_bytes_per_element=HIDDEN_BYTES)
    return c.finish()


@dataclass
class VideoCost:
    """Seconds per video on one group, and its parts (arrays over the layout grid)."""

    latency: np.ndarray
    stages: dict[str, np.ndarray]
    step: StageCost
    other: StageCost


def video_cost(model: DiffusionVideoModelSpec, wl: TextToVideoWorkload, hw: HardwareSpec, precision: str,
               u, cfg) -> VideoCost:
    """Latency of one video on a group of ``u`` × ``cfg`` ranks (arrays broadcast)."""
    shape = video_shape(model, wl)
    u = np.asarray(u, dtype=float)
    cfg = np.asarray(cfg, dtype=float)
    fwd = dit_forward(model, shape, hw, precision, u)
    forwards_per_rank = wl.denoising_steps * wl.guidance_branches / cfg
    # per step: the CFG ranks exchange their noise predictions (fp32 latent), plus the host's
    # scheduler step
    latent_bytes = float(shape.latent_frames * shape.latent_height * shape.latent_width
                         * model.transformer.latent_channels * 4.0)
    ex = Coster(hw)
    ex.collective(Collective.ALL_GATHER, latent_bytes * cfg, cfg, wl.denoising_steps)
    ex.overhead(hw.efficiency.step_overhead_ms * MS, wl.denoising_steps)
    ex_cost = ex.finish()
    text = text_encoder(model, shape, hw, wl.prompts_encoded)
    vae = vae_decode(model, shape, hw)
    other = text.add(vae).add(ex_cost)
    denoise = forwards_per_rank * fwd.total
    stages = {"text_encoder_s": np.broadcast_to(text.total, u.shape) * 1.0,
              "denoise_s": denoise + ex_cost.total,
              "vae_decode_s": np.broadcast_to(vae.total, u.shape) * 1.0}
    latency = stages["text_encoder_s"] + stages["denoise_s"] + stages["vae_decode_s"]
    step = StageCost({k: v * 1.0 for k, v in fwd.by_kind.items()}, fwd.compute_bound, fwd.memory_bound, fwd.kernels)
    # whole-video by kind: forwards plus the rest
    whole = StageCost().add(fwd, forwards_per_rank).add(other)
    return VideoCost(latency=latency, stages=stages, step=step, other=whole)


def memory_needed(model: DiffusionVideoModelSpec, wl: TextToVideoWorkload, hw: HardwareSpec, precision: str, u):
    """Bytes resident on one rank: both experts' weights in ``precision``, the text encoder and the
    VAE in 16 bit, the block activations of the rank's tokens, the runtime reserve."""
    shape = video_shape(model, wl)
    d = model.transformer
    s = shape.tokens / np.asarray(u, dtype=float)
    weights = d.n_experts * d.params_per_expert * BYTES_PER_ELEMENT[precision]
    weights = weights + (model.text_encoder.params + VAE_PARAMS) * HIDDEN_BYTES
    act = s * (ACTIVATION_WIDTHS * d.hidden_size + d.ffn_size) * HIDDEN_BYTES
    return weights + act + hw.memory.reserve_gib * GIB


def layouts(model: DiffusionVideoModelSpec, wl: TextToVideoWorkload, accelerators: int):
    """Candidate (ulysses, cfg) pairs that fit ``accelerators``: ulysses divides the head count."""
    us = [u for u in range(1, accelerators + 1) if model.transformer.n_heads % u == 0]
    cs = sorted({1, wl.guidance_branches})
    pairs = [(u, c) for u in us for c in cs if u * c <= accelerators]
    return np.array([p[0] for p in pairs], float), np.array([p[1] for p in pairs], float)
