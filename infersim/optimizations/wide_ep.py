"""Wide expert parallelism with expert load balancing.

Changes: ``plan.search.ep_max`` — how many GPUs one pipeline stage may spread the routed experts
over (EP × expert TP), and so the largest MoE instance: one 8-GPU node without this transform, the
whole scale-up domain with it (e.g. 72 on an NVL72, EP72 over 256 experts with ⌈256/72⌉ = 4 slots per
GPU, the 32 spares holding redundant copies), or ``max_ep`` — beyond the domain the all-to-alls run
hierarchically over the scale-out NICs (``infersim.comm``). ``plan.eplb_efficiency``: the load
balancer places redundant copies of hot experts, removing that share of the popularity skew and of
the uneven-placement skew when ep does not divide the expert count. Redundant slots exist only
with a balancer: at ``eplb_efficiency`` 0 (the MLPerf presets: no EPLB) every rank holds E/ep whole
experts and ep must divide E (``parallel.redundant_slots``). ``plan.dispatch_bytes``:
dispatch quantized before the all-to-all. Spreading experts frees memory per GPU, so the KV cache
— and the batch — can grow, and each GPU reads fewer expert weights per step; the search weighs
that against the longer all-to-alls.
Neutral: ``enabled: false``.
Source: shared/reference/effects.md section 4 (DeepSeek EP144 decode with 32 redundant experts,
SGLang EPLB 1.49x prefill / 2.54x decode, TRT-LLM wide-EP blog 8, NVL72 EP up to 32 where an
8-GPU island caps EP at 8).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from pydantic import Field

from ..plan import Plan
from .base import Needs, Stage, Transform, register


@register
class WideEP(Transform):
    kind: ClassVar[str] = "wide_ep"
    stage: ClassVar[Stage] = Stage.LAYOUT
    summary: ClassVar[str] = "expert parallelism across the whole scale-up domain, with EPLB"
    rank: ClassVar[int] = 2
    needs: ClassVar[tuple[Needs, ...]] = (Needs.MOE,)

    max_ep: int | None = Field(default=None, ge=1, le=4096)
    """Most GPUs a MoE stage spreads its experts over (default: the hardware's scale-up domain;
    larger values let instances span several domains)."""
    load_balancer: bool = True
    """Expert load balancer with redundant experts."""
    eplb_efficiency: float = Field(default=0.9, ge=0, le=1)
    """Share of the popularity skew the balancer removes; 0 means no balancer runs (no redundant
    slots, so ep divides the expert count)."""
    dispatch_precision_bytes: float | None = Field(default=None, gt=0, le=4)
    """Bytes per element of quantized dispatch payloads (e.g. 1 for fp8); None keeps activations."""

    def _apply(self, plan: Plan) -> Plan:
        ep_max = self.max_ep or plan.hardware.scale_up.domain_size
        new = replace(plan, search=replace(plan.search, ep_max=max(ep_max, plan.search.ep_max)))
        if self.load_balancer:
            new = replace(new, eplb_efficiency=self.eplb_efficiency)
        if self.dispatch_precision_bytes is not None:
            new = replace(new, dispatch_bytes=self.dispatch_precision_bytes)
        return new
