"""Prefill/decode disaggregation (NVIDIA Dynamo, DistServe, Splitwise).

Changes: ``plan.serving.disaggregated`` and its knobs. The search then sizes two pools: decode
instances run decode-only steps (no prefill interference, so TPOT is the bare step time), prefill
instances run batched prompt chunks as an M/G/1 queue whose utilization is the highest meeting
the TTFT limit; the P:D ratio follows by rate matching (prefill GPUs per request/s times the
decode pool's request rate). The KV cache of each prompt moves from prefill to decode over the
interconnect (scale-up inside one domain, else scale-out); ``kv_transfer_exposed`` of that time
adds to TTFT.
Neutral: ``enabled: false``.
Source: shared/reference/effects.md section 2 (TRT-LLM blog 5 rate-matching formula;
1.4-1.8x at matched interactivity without MTP, 0-25 % below the rate-matched ideal).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from pydantic import Field

from ..plan import Plan
from .base import Needs, Stage, Transform, register


@register
class Disaggregation(Transform):
    kind: ClassVar[str] = "disagg"
    stage: ClassVar[Stage] = Stage.SERVING
    summary: ClassVar[str] = "separate prefill and decode pools, rate-matched, KV transferred"
    rank: ClassVar[int] = 5
    choice_needs: ClassVar[tuple[Needs, ...]] = (Needs.LATENCY_LIMIT,)

    kv_transfer_exposed: float = Field(default=0.3, ge=0, le=1)
    """Share of KV transfer time not overlapped with the prefill (layer-wise streaming hides most)."""
    prefill_chunk_tokens: float = Field(default=8192.0, gt=0, le=1e6)
    """Prompt tokens per prefill step on prefill instances."""

    def _apply(self, plan: Plan) -> Plan:
        return replace(plan, serving=replace(plan.serving, disaggregated=True,
                                             kv_transfer_exposed=self.kv_transfer_exposed,
                                             prefill_chunk_tokens=self.prefill_chunk_tokens))
