"""Computation/communication overlap (two-batch overlap, overlapped MoE combine).

Changes: ``plan.comm_overlap`` (share of collective time hidden behind compute) and
``plan.overlap_min_tokens`` (below this many tokens per device the engine does not split the
batch, because the halved GEMMs lose more than the hidden communication saves).
Model: t = compute + max(0, comm − overlap·comm) with hidden ≤ compute.
Neutral: ``enabled: false`` (or hidden_fraction 0).
Source: shared/reference/effects.md section 5 (SGLang TBO: −27 % at 32 tokens/device, break-even
64-128, +25.5 % at 256; +27-35 % in prefill).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from pydantic import Field

from ..plan import Plan
from .base import Stage, Transform, register


@register
class Overlap(Transform):
    """Hide collective time behind compute when the batch is large enough to split."""

    kind: ClassVar[str] = "overlap"
    stage: ClassVar[Stage] = Stage.LAYOUT
    summary: ClassVar[str] = "two-batch overlap of all-reduce/all-to-all with compute"

    hidden_fraction: float = Field(default=0.8, ge=0, le=1)
    """Share of communication time hidden when overlap is active."""
    min_tokens_per_device: float = Field(default=128.0, ge=0)
    """Tokens per device per step below which overlap is not used."""

    def _apply(self, plan: Plan) -> Plan:
        return replace(plan, comm_overlap=self.hidden_fraction, overlap_min_tokens=self.min_tokens_per_device)
