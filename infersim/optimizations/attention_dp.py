"""Attention data parallelism for MoE models (TensorRT-LLM ``enable_attention_dp``).

Changes: ``plan.search.attention_dp`` — the layout search may run attention with dp = tp (each
rank serves its own sequences with full attention weights) while experts stay sharded by EP.
For MLA the latent KV cache is then not replicated tp times, so the batch can grow.
Neutral: ``enabled: false``.
Source: shared/reference/effects.md section 4 (TRT-LLM blog 3: attention DP vs TP +400 %
because TP duplicates the MLA KV cache 8x); mlperf_submission_configs.md section 1 (DEP8).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from ..plan import Plan
from .base import Needs, Stage, Transform, register


@register
class AttentionDP(Transform):
    kind: ClassVar[str] = "attention_dp"
    stage: ClassVar[Stage] = Stage.LAYOUT
    summary: ClassVar[str] = "data-parallel attention inside the TP group (MoE models)"
    rank: ClassVar[int] = 1
    needs: ClassVar[tuple[Needs, ...]] = (Needs.MOE,)

    def _apply(self, plan: Plan) -> Plan:
        return replace(plan, search=replace(plan.search, attention_dp=True))
