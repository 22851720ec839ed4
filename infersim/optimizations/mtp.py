"""Multi-token prediction / speculative decoding.

Changes: ``plan.serving.tokens_per_step`` (expected accepted tokens per verify step),
``plan.serving.draft_depth`` (each decode step verifies 1 + depth query tokens per sequence, so
verification cost grows with batch) and ``plan.serving.draft_layers`` (depth sequential passes of
the MTP module, each one decoder layer plus the LM head, on one token per sequence).
Model: L(d) = 1 + Σ_{k≤d} Π_{i≤k} p_i, with p_i = first·decay^(i−1) unless a list is given.
Neutral: ``enabled: false`` or depth 0.
Per-request spread: requests accept at different rates (log-sd ``request_log_sd`` of a request's
mean tokens per step), which widens the per-request TPOT tail (``serving.tpot_spread``).
Source: shared/reference/effects.md section 1 (DeepSeek-V3 MTP 85-90 % second-token acceptance;
TRT-LLM blog 1: L = 1.92, 2.58, 2.82 for d = 1..3; best d = 3).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

import numpy as np
from pydantic import Field, model_validator

from ..graph import Layout, OpGraph, Shape, build_graph
from ..plan import Plan
from .base import Needs, Stage, Transform, register


def expected_tokens(acceptance: list[float]) -> float:
    """1 + Σ_k Π_{i≤k} p_i: expected tokens emitted per verify step."""
    total, run = 1.0, 1.0
    for p in acceptance:
        run *= p
        total += run
    return total


def draft_ops(plan: Plan, layout: Layout, stage_shape: Shape, imbalance) -> OpGraph:
    """Drafting ops of one pipeline stage's step: ``draft_layers`` decoder layers (plus the LM
    head once per draft depth) on one token per sequence, the MTP module's sequential passes
    (DeepSeek-V3 MTP; EAGLE-style heads alike)."""
    model = plan.model
    one = Shape(decode_seqs=stage_shape.decode_seqs, decode_q=1.0, decode_ctx=stage_shape.decode_ctx)
    g = build_graph(model, one, layout, plan.formats, moe_imbalance=imbalance, dispatch_bytes=plan.dispatch_bytes)
    per_layer = plan.serving.draft_layers / model.n_layers
    depth = max(plan.serving.draft_depth, 1)
    ops = []
    for op in g.ops:
        scale = depth / np.asarray(layout.pp, dtype=float) if op.block == "head" else per_layer
        ops.append(replace(op, name="draft_" + op.name, count=op.count * scale))
    return OpGraph(tuple(ops), phase="draft")


@register
class MultiTokenPrediction(Transform):
    kind: ClassVar[str] = "mtp"
    stage: ClassVar[Stage] = Stage.GRAPH
    summary: ClassVar[str] = "draft d tokens with MTP heads and verify them in one step"
    rank: ClassVar[int] = 4
    choice_needs: ClassVar[tuple[Needs, ...]] = (Needs.MTP_HEADS,)

    depth: int = Field(default=3, ge=0, le=8)
    """Draft tokens per step."""
    first_acceptance: float = Field(default=0.9, ge=0, le=1)
    """Conditional acceptance of the first draft token."""
    decay: float = Field(default=0.7, ge=0, le=1)
    """Ratio between successive conditional acceptances (geometric decay)."""
    acceptance: list[float] | None = None
    """Explicit per-position conditional acceptances (overrides first/decay; length ≥ depth)."""
    layers_per_draft: float = Field(default=1.0, ge=0)
    """Decoder-layer equivalents per draft pass (DeepSeek MTP module: 1)."""
    request_log_sd: float = Field(default=0.070, ge=0, le=1)
    """Log-standard deviation across requests of a request's own mean accepted tokens per step, which
    spreads per-request TPOT (``serving.tpot_spread``). 0.070 = ln(1.226 / 1.041) / 2.326: the
    MLPerf v6.0 DeepSeek-R1 Interactive runs (MTP 3; all three) have a median TPOT p99/p50 of 1.226
    (1.224, 1.226, 1.303) where the 26 v5.1/v6.0 Server runs, without MTP, have 1.041
    (shared/reference/mlperf_operating_points.csv columns tpot_p50_ms, tpot_p99_ms); two of the
    three are disaggregated decode workers, which no prompt interrupts, so the extra spread is the
    requests' own acceptance."""

    @model_validator(mode="after")
    def _check(self):
        if self.acceptance is not None:
            if len(self.acceptance) < self.depth:
                raise ValueError(f"acceptance needs {self.depth} entries")
            if any(not 0 <= p <= 1 for p in self.acceptance):
                raise ValueError("acceptance values must lie in [0, 1]")
        return self

    def probabilities(self) -> list[float]:
        if self.acceptance is not None:
            return list(self.acceptance[: self.depth])
        return [self.first_acceptance * self.decay**i for i in range(self.depth)]

    def search_variants(self) -> list["MultiTokenPrediction"]:
        """A round's MTP choice is searched at every depth up to its own (deeper drafts pay
        more verification per step than their extra accepted tokens at large batch); explicit
        per-position acceptances fix the depth."""
        if self.acceptance is not None:
            return [self]
        return [self.model_copy(update={"depth": d}) for d in range(1, self.depth + 1)] or [self]

    def _apply(self, plan: Plan) -> Plan:
        if self.depth == 0:
            return plan
        serving = replace(plan.serving, tokens_per_step=expected_tokens(self.probabilities()),
                          draft_depth=self.depth, draft_layers=self.depth * self.layers_per_draft,
                          tokens_per_step_log_sd=self.request_log_sd)
        extras = plan.step_extras + ((("mtp_draft", draft_ops),) if self.layers_per_draft > 0 else ())
        return replace(plan, serving=serving, step_extras=extras)
