"""The plan: everything the cost model needs besides the configuration grid.

A ``Plan`` binds the specs (hardware, model, workload) with the serving knobs that optimizations
change. Optimizations are pure transforms ``Plan -> Plan`` (see ``infersim.optimizations``); the
cost code reads only numeric fields here and never asks which optimization is on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .graph import Formats, OpGraph
from .specs.hardware import HardwareSpec
from .specs.model import ModelSpec

GraphPass = Callable[[OpGraph], OpGraph]
StepExtra = Callable[..., OpGraph]
"""(plan, layout, stage_shape, moe_imbalance) -> extra ops of one pipeline stage's step."""


@dataclass(frozen=True)
class SearchSpace:
    """Which layouts and batches the search may use (fixed values come from the CLI)."""

    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    dp: tuple[int, ...] | None = None
    batch: tuple[float, ...] | None = None
    max_batch: float | None = None
    attention_dp: bool = False
    """Allow attention data parallelism (dp = tp) for MoE models."""
    ep_max: int = 8
    """Most GPUs one pipeline stage spreads a MoE model's experts over (EP × expert TP), and so the
    largest MoE instance stage: one 8-GPU node by default; WideEP raises it."""


@dataclass(frozen=True)
class Serving:
    """Serving-stage knobs."""

    tokens_per_step: float = 1.0
    """Expected output tokens per sequence per decode step (1 + accepted draft tokens with MTP)."""
    draft_depth: int = 0
    """Draft tokens verified per step (MTP / speculative decoding)."""
    draft_layers: float = 0.0
    """Decoder-layer equivalents run per step to produce the drafts (depth × MTP layers)."""
    tokens_per_step_log_sd: float = 0.0
    """Log-standard deviation across requests of a request's own mean accepted tokens per step
    (0: every request accepts at the mean); sets the spread of per-request TPOT (``serving.tpot_spread``)."""
    prefix_share: float = 0.0
    """Fraction of input tokens that are a prefix shared with earlier requests (workload)."""
    kv_aware_efficiency: float = 0.0
    """Share of shareable prefix tokens a KV-aware router finds cached (0: load-balancing router,
    which finds a request's prefix on its worker with probability 1/workers)."""
    prefix_cache_tokens: float | None = None
    """Prefix tokens each worker can keep cached (None: unlimited)."""
    prefix_working_set_tokens: float = 1e6
    """Distinct shareable-prefix tokens the traffic reuses (cache capacity matters below it)."""
    disaggregated: bool = False
    """Prefill and decode run on separate pools."""
    kv_transfer_exposed: float = 1.0
    """Share of the KV-cache transfer time not hidden behind prefill (disaggregation)."""
    prefill_chunk_tokens: float = 8192.0
    """Prompt tokens batched per prefill step on a dedicated prefill instance."""
    prefill_workers: int = 0
    """Prefill workers of a disaggregated deployment (0: as many as rate matching asks)."""
    decode_workers: int = 0
    """Decode workers of a disaggregated deployment (0: as many as rate matching asks)."""
    prefill_tp: int = 0
    """GPUs per prefill worker (0: the prefill pool's layout is searched)."""


@dataclass(frozen=True)
class Engine:
    """Serving-engine settings of one round and model (``presets/*.yaml`` ``engine:`` block).

    Per attention rank where the engine runs attention data parallelism (TensorRT-LLM ADP: each
    rank schedules its own sequences), per instance otherwise.
    """

    max_batch_size: float | None = None
    """Most sequences in flight per attention rank (None: no cap)."""
    max_num_tokens: float | None = None
    """Token budget of one iteration per attention rank, decode and prompt tokens (None: none)."""
    chunked_prefill: bool = True
    """Prompts longer than the free budget are split across iterations (False: a prompt must fit
    one iteration's budget whole)."""
    gate_timeout_iters: int = 0
    """Attention-DP admission gate: iterations a rank's waiting prompts are held while not every
    rank has one (0: gate off, prompts are admitted every iteration)."""
    gate_wait_iters: int = 0
    """Attention-DP admission gate: extra iterations held once every rank has a waiting prompt."""
    decode_steps: int = 1
    """Multi-step scheduling (vLLM V0 ``num_scheduler_steps``): the scheduler runs once every this
    many decode iterations, so waiting prompts are admitted only then (1: every iteration)."""
    graph_sizes: tuple[int, ...] | None = None
    """Per-rank decode batch sizes with a captured CUDA graph, ascending (None: every size; empty:
    no graphs, every iteration launches its kernels)."""
    graphs_capture_prompts: bool = False
    """The captured CUDA graphs also run iterations that carry prompt tokens (vLLM V1 piecewise
    graphs); False: only decode-only iterations replay a graph (TensorRT-LLM, SGLang, vLLM V0)."""
    stream_interval: int = 1
    """Output tokens per streamed response chunk (host work per token falls as it grows)."""
    python_executor: bool = False
    """The executor loop runs in Python (TensorRT-LLM PyTorch backend / trtllm-serve)."""
    overlap_scheduler: bool = False
    """The executor prepares the next iteration on the host while the GPU runs this one (TensorRT-LLM
    PyTorch backend, ``disable_overlap_scheduler: false``): the per-step host overhead
    (``efficiency.step_overhead_ms``) is hidden behind the GPU's step, which then lasts the longer
    of the two; False: it adds to every step (the C++ executor, vLLM, SGLang as modelled)."""
    host_s_per_stream_event: float = 0.0
    """Host time per streamed response chunk, serial with the iteration: the engine's executor
    loop builds and sends one response per running sequence every ``stream_interval`` tokens
    (0: a response path off the iteration's critical path, e.g. the C++ executor)."""
    fused_elementwise: tuple[str, ...] | None = None
    """Elementwise ops (by name) the stack's kernels absorb under ``fusion``; the rest stay their
    own memory-bound kernels (None: every fusable one is absorbed)."""
    rank_router: str = "balanced"
    """How an attention-DP engine assigns arriving requests to its ranks. "balanced": TensorRT-LLM's
    ADP router (``tensorrt_llm/_torch/pyexecutor`` request routing, every fetch): ranks are filled
    up to the water level max(⌈(active + new)/d⌉, busiest rank's active requests), the rank with the
    fewest active prompt tokens first, longest prompts first, so a rank's freed slots are refilled
    and the ranks' counts stay within a few sequences of each other. "random": each request to a
    uniformly random rank (per-rank counts independent Poisson, the busiest rank far above the mean:
    the model of an engine that routes without looking at its ranks)."""

    instance_dispatch: str = "random"
    """How the harness in front of several instances hands them arriving requests (Server and
    Interactive; one instance: no effect). "random": each request to a uniformly random instance, so
    each sees Poisson arrivals thinned at random (c_a² unchanged). "round_robin": dealt in turn
    (NVIDIA llmlib ``traffic_distribution_policy`` round_robin): an instance gets every N-th arrival,
    a renewal process of c_a² = c²/N (Erlang-N gaps from Poisson). "load_balancing": to the instance
    with the fewest requests in flight (NVIDIA harness default ``loadBalancing`` / llmlib Server
    ``load_balancing``, AMD harness ``shortest_queue``): the instance refills its freed slots, its
    arrivals as dispersed as the output length, between c²/N and c² (``scheduler.instance_arrival_scv``).
    "fewest_tokens": to the instance with the fewest prompt tokens waiting (NVIDIA llmlib
    ``isl_load_balancing``): the instances' prompt queues become one pooled queue
    (``scheduler.pooled_backlog``, one attention rank per instance).
    The round presets keep "random" (docs/readme-sessions.md, twenty-second session)."""

    def free_tokens(self, decode_tokens_per_rank):
        """Prompt tokens a rank's ``max_num_tokens`` budget leaves beside its decode tokens (at
        least 1; the budget must be set)."""
        return np.maximum(self.max_num_tokens - np.asarray(decode_tokens_per_rank, dtype=float), 1.0)

    def host_time(self, batch):
        """Host time per iteration on the critical path: one streamed response per running sequence
        of the instance every ``stream_interval`` iterations (with attention DP the responses of every
        rank are gathered and sent by one process), ``host_s_per_stream_event`` each. The same
        executor loop runs in every scenario, Offline too."""
        return self.host_s_per_stream_event * np.asarray(batch, dtype=float) / self.stream_interval

    @property
    def graph_max(self) -> float | None:
        if self.graph_sizes is None:
            return None
        return float(self.graph_sizes[-1]) if self.graph_sizes else 0.0


def admission_period(engine) -> int:
    """Iterations per scheduler call, so per chance to admit prompts: ``Engine.decode_steps`` (at
    least 1; an engine-like object without the field, 1)."""
    return max(int(getattr(engine, "decode_steps", 1)), 1)


@dataclass(frozen=True)
class Plan:
    hardware: HardwareSpec
    model: ModelSpec
    formats: Formats
    graph_passes: tuple[tuple[str, GraphPass], ...] = ()
    """Named graph transforms applied to every step's operator graph (fusion)."""
    step_extras: tuple[tuple[str, StepExtra], ...] = ()
    """Named builders of extra ops run in every decode step (MTP draft passes)."""
    launch_scale: float = 1.0
    """Remaining fraction of per-kernel launch overhead (graph capture lowers it)."""
    comm_overlap: float = 0.0
    """Fraction of communication time hidden behind compute (two-batch overlap)."""
    moe_popularity_cv: float = 0.6
    """Coefficient of variation of expert popularity (routing skew) before load balancing."""
    eplb_efficiency: float = 0.0
    """Share of the popularity skew removed by expert load balancing (0 = none)."""
    moe_imbalance_noise: float = 2.0
    """z-score of the sampling-noise term of the max-over-ranks expert load."""
    dispatch_bytes: float | None = None
    """Bytes per element of MoE dispatch payloads (None: activation format)."""
    kernel_efficiency: float = 1.0
    """Software maturity multiplier on compute/attention efficiency (per-round preset); not on the
    routed experts' grouped GEMMs, which ``moe_kernel_efficiency`` alone describes."""
    moe_kernel_efficiency: float = 1.0
    """Software maturity of the routed-expert GEMMs (per-round preset): the MoE backend's whole
    factor on their MMA rate and weight stream."""
    host_overhead_scale: float = 1.0
    """Multiplier on the hardware's per-step host overhead (per-round preset)."""
    search: SearchSpace = field(default_factory=SearchSpace)
    serving: Serving = field(default_factory=Serving)
    engine: Engine = field(default_factory=Engine)
    """Engine settings (batch cap, token budget, admission gate, captured graph sizes)."""
    applied: tuple[str, ...] = ()
    """Names of the optimizations applied, in order (for reports)."""

    @property
    def graph_max_batch(self) -> float | None:
        """Largest per-rank decode batch with a captured graph; larger steps launch eagerly."""
        return self.engine.graph_max

    @property
    def cuda_graphs(self) -> str:
        """Which iterations replay a captured CUDA graph (for reports)."""
        top = self.graph_max_batch
        if self.launch_scale >= 1.0 or top == 0:
            return "none: every iteration launches its kernels"
        decode = "decode-only iterations" if top is None else f"decode-only iterations up to {top:.0f} sequences per rank"
        prompts = "iterations with prompt tokens too (piecewise)" if self.engine.graphs_capture_prompts \
            else "iterations with prompt tokens launch eagerly"
        return f"{decode}; {prompts}"
