"""Prefill/decode disaggregation (NVIDIA Dynamo, DistServe, Splitwise).

Changes: ``plan.serving.disaggregated`` and its knobs. The search then sizes two pools: decode
instances run decode-only steps (no prefill interference, so TPOT is the bare step time), prefill
instances run batched prompt chunks as an M/G/1 queue whose utilization is the highest meeting
the TTFT limit; the P:D ratio follows by rate matching (prefill GPUs per request/s times the
decode pool's request rate). The KV cache of each prompt moves from prefill to decode over the
interconnect (scale-up inside one domain, else scale-out); ``kv_transfer_exposed`` of that time
adds to TTFT. ``prefill_workers`` / ``decode_workers`` / ``prefill_tp`` pin a deployment's own
split instead of rate matching (0: searched).
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
    prefill_workers: int = Field(default=0, ge=0, le=1_000_000)
    """Prefill workers, pinned (0: rate-matched, searched), e.g. a deployment's own split."""
    decode_workers: int = Field(default=0, ge=0, le=1_000_000)
    """Decode workers, pinned (0: rate-matched, searched); with both pinned the system serves
    min(D·r_d, P·c_p)."""
    prefill_tp: int = Field(default=0, ge=0, le=1024)
    """GPUs per prefill worker, pinned (0: searched); the decode workers' layout is the run's (--tp ...)."""

    def _apply(self, plan: Plan) -> Plan:
        return replace(plan, serving=replace(plan.serving, disaggregated=True,
                                             kv_transfer_exposed=self.kv_transfer_exposed,
                                             prefill_chunk_tokens=self.prefill_chunk_tokens,
                                             prefill_workers=self.prefill_workers, decode_workers=self.decode_workers,
                                             prefill_tp=self.prefill_tp))
