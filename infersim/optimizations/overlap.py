"""Computation/communication overlap (two-batch overlap, overlapped MoE combine).

Changes: ``plan.comm_overlap`` (share of collective time hidden behind compute).
Model (``infersim.engine.step_cost``): the engine may split a step into two micro-batches that
each re-read the weights, hiding a share of one's communication behind the other's compute;
it runs whichever of the split and the plain step is faster, so small batches, where the
re-read weights cost more than the hidden communication saves, keep the plain step.
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
    rank: ClassVar[int] = 3

    hidden_fraction: float = Field(default=0.8, ge=0, le=1)
    """Share of communication time hidden when overlap is active."""
    def _apply(self, plan: Plan) -> Plan:
        return replace(plan, comm_overlap=self.hidden_fraction)
