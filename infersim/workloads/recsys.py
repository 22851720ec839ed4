"""Generative recommendation (DLRMv3 / HSTU): embedding lookups, then sequential transduction.

One sample is one ranking request: the user's interaction history (UIH) plus the candidates to
score form one sequence of contextual + history + candidate tokens. Per sample:
- embedding lookups: one row per history item and per candidate from each sequence table, one
  row per request from the contextual tables; row gathers from HBM, and when the tables are
  sharded over the system's accelerators the (g−1)/g remote rows cross the interconnect as an
  all-to-all (the NVL72 harness shards the item table over all 72 GPUs with a full copy of the
  dense weights per GPU, shared/reference/mlperf_non_llm.md);
- a per-token input MLP (contextual preprocessor);
- ``n_layers`` HSTU blocks: fused U/V/Q/K projection, pointwise causal attention in which each
  history token attends to the history before it and each candidate to the whole history and
  itself (target-aware) through SiLU(q·k) in place of a softmax (an exponential and a
  reciprocal per score on the special-function unit), output projection of
  3·heads·linear_dim → embedding_dim;
- the candidate MLPs (item-embedding MLP and the task head).
Requests are batched per accelerator; the batch pays the fixed launch and host costs once.
Offline is the best batch's throughput; Server the highest Poisson rate whose p99 latency
(batch fill + queueing + service) stays within the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Collective
from ..specs.hardware import HardwareSpec
from ..specs.workload_models import GenerativeRecommenderSpec, RecommendationWorkload
from ..units import GIB, MS
from .cost import Coster, StageCost

HIDDEN_BYTES = 2.0
"""Dense activations are 16 bit (DLRMv3 declares fp16)."""

ELEMENTWISE_PASSES = 8.0
"""Read+write passes over the embedding width per token per HSTU layer outside the GEMMs and
the attention: input LayerNorm, SiLU on U/V/Q/K (over the 4-part width, counted as 2 passes),
output LayerNorm and the gating u ⊙ norm(attn), the residual add."""

ACTIVATION_WIDTHS = 8.0
"""Embedding-width buffers per token alive at once (input, U, V, Q, K, attention output, the
3-way concatenation); sizes the activation memory per request."""

SILU_SFU_OPS = 2.0
"""Special-function-unit results per attention score element and head in an HSTU layer: the
pointwise SiLU(x) = x·σ(x) = x / (1 + e^−x) takes one exponential and one reciprocal
(generative_recommenders' HSTU attention applies SiLU to q·kᵀ in place of a softmax,
mlcommons/inference recommendation/dlrm_v3/generative_recommenders/modules/stu.py)."""

SHARD_THRESHOLD_BYTES = 1.0 * GIB
"""Tables above this size are sharded over the system (row-wise); smaller ones are replicated."""


BATCHES = np.unique(np.round(np.geomspace(1, 4096, 49))).astype(float)
"""Requests per batch searched per accelerator."""



@dataclass(frozen=True)
class SequenceShape:
    history: float
    candidates: float
    contextual: float

    @property
    def tokens(self) -> float:
        return self.history + self.candidates + self.contextual

    @property
    def attention_pairs(self) -> float:
        """Query-key pairs of the causal target-aware mask: history (with the contextual tokens)
        attends causally, each candidate to the history and itself."""
        n = self.history + self.contextual
        return n * (n + 1) / 2.0 + self.candidates * (n + 1)


def sequence_shape(model: GenerativeRecommenderSpec, wl: RecommendationWorkload) -> SequenceShape:
    """The request's sequence, the history truncated so that the total fits ``max_seq_len``."""
    room = model.hstu.max_seq_len - wl.candidates - wl.contextual_tokens
    return SequenceShape(float(min(wl.history_tokens, max(room, 0))), float(wl.candidates), float(wl.contextual_tokens))


def lookup_bytes(model: GenerativeRecommenderSpec, shape: SequenceShape) -> tuple[float, float]:
    """(bytes gathered per request from tables that are sharded, from tables small enough to
    replicate). A table is sharded when it is larger than ``SHARD_THRESHOLD_BYTES``."""
    sharded = replicated = 0.0
    for t in model.tables:
        rows = {"sequence": shape.history, "candidates": shape.candidates,
                "sequence_and_candidates": shape.history + shape.candidates, "once": 1.0}[t.lookups]
        if t.bytes > SHARD_THRESHOLD_BYTES:
            sharded += rows * t.row_bytes
        else:
            replicated += rows * t.row_bytes
    return sharded, replicated


def batch_cost(model: GenerativeRecommenderSpec, wl: RecommendationWorkload, hw: HardwareSpec, batch,
               accelerators: int) -> StageCost:
    """Seconds for one accelerator to score ``batch`` (array) requests, by kind."""
    m = model.hstu
    shape = sequence_shape(model, wl)
    B = np.asarray(batch, dtype=float)
    L = B * shape.tokens
    p = model.dense_precision
    e = m.embedding_dim
    c = Coster(hw)
    sharded, replicated = lookup_bytes(model, shape)
    c.gather(B * (sharded + replicated) * 2.0)  # read the rows, write the gathered sequence
    g = float(accelerators)
    c.collective(Collective.ALL_TO_ALL, B * sharded, g)  # remote rows of the sharded tables
    c.gemm(L, m.preprocessor_hidden_dim, m.preprocessor_input_dim, p)
    c.gemm(L, e, m.preprocessor_hidden_dim, p)
    uvqk = (2 * m.linear_dim + 2 * m.qk_dim) * m.n_heads
    c.gemm(L, uvqk, e, p, m.n_layers)
    c.gemm(L, e, 3 * m.linear_dim * m.n_heads, p, m.n_layers)
    flops = B * shape.attention_pairs * m.n_heads * 2.0 * (m.qk_dim + m.linear_dim)
    io = L * (uvqk + m.linear_dim * m.n_heads) * HIDDEN_BYTES
    # SiLU(q·k) per score element and head: one exponential and one reciprocal on the SFU
    sfu = B * shape.attention_pairs * m.n_heads * SILU_SFU_OPS
    c.attention(flops, io, p, m.n_layers, sfu_ops=sfu)
    c.elementwise(ELEMENTWISE_PASSES * L * e * HIDDEN_BYTES, m.n_layers)
    cand = B * shape.candidates
    for k_in, n_out in model.candidate_mlp_layers:
        c.gemm(cand, n_out, k_in, p)
    c.overhead(hw.efficiency.step_overhead_ms * MS)
    return c.finish()


def memory_per_accelerator(model: GenerativeRecommenderSpec, wl: RecommendationWorkload, hw: HardwareSpec, batch,
                           accelerators: int):
    """Bytes on one accelerator: its shard of the large tables, the small tables and dense
    weights replicated, the batch's activations, the runtime reserve."""
    big = sum(t.bytes for t in model.tables if t.bytes > SHARD_THRESHOLD_BYTES)
    small = model.table_bytes - big
    dense = (model.hstu.n_layers * model.hstu.params_per_layer + model.candidate_mlp_params) * HIDDEN_BYTES
    shape = sequence_shape(model, wl)
    act = np.asarray(batch, float) * shape.tokens * ACTIVATION_WIDTHS * model.hstu.embedding_dim * HIDDEN_BYTES
    return big / accelerators + small + dense + act + hw.memory.reserve_gib * GIB


def server_p99(service_mean, service_tail):
    """p99 latency (s) of a request under gated batching (the accelerator serves, back to back,
    every request that arrived during the previous batch).

    Notes
    -----
    In steady state the batch is B = λ·S(B). A request arrives during a batch (it waits at most
    that batch's service S(B)) and is served in the next one, whose size is Poisson with mean B;
    its p-quantile is B + z_p·√B, served in ``service_tail`` = S(B + z_p·√B). So
    latency_p ≈ S(B) + S(B + z_p·√B). The LLM server model (infersim.serving) uses the same
    gated-cycle picture for its prefill admissions.
    """
    return service_mean + service_tail
