"""KV-aware routing: send a request to the worker that already holds its prefix's KV cache.

Changes: ``plan.serving.kv_aware_efficiency`` (and optionally the per-worker prefix cache size).
Model: with shareable-prefix fraction h (workload), a load-balancing router finds a request's
prefix cached with probability 1/N over N workers (h_eff = h/N); a KV-aware router finds it with
h_eff = h·η·min(1, N·cache/working_set). Prefill work per request falls by h_eff, which lowers
TTFT through both the service time and the queueing it feeds — so TTFT and throughput effects
emerge from the serving model, not from a constant.
Neutral: ``enabled: false``; with h = 0 it changes nothing either.
Source: shared/reference/effects.md section 3 (η ≈ 0.8-0.95; M/D/1 amplification of TTFT).
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from pydantic import Field

from ..plan import Plan
from .base import Needs, Stage, Transform, register


@register
class KVRouting(Transform):
    kind: ClassVar[str] = "kv_routing"
    stage: ClassVar[Stage] = Stage.SERVING
    summary: ClassVar[str] = "route requests to workers holding their prefix KV (prefix reuse)"
    rank: ClassVar[int] = 6
    choice_needs: ClassVar[tuple[Needs, ...]] = (Needs.SHARED_PREFIX,)

    efficiency: float = Field(default=0.9, ge=0, le=1)
    """Share of shareable prefix tokens found (load-balance trade-off of the router)."""
    cache_tokens_per_worker: float | None = Field(default=None, gt=0)
    """Prefix tokens a worker keeps cached (None: unlimited)."""
    working_set_tokens: float | None = Field(default=None, gt=0)
    """Distinct shareable prefix tokens in the traffic (None: the workload's, from its trace or
    ``prefix_working_set_tokens``, else 1e6)."""

    def _apply(self, plan: Plan) -> Plan:
        ws = plan.serving.prefix_working_set_tokens if self.working_set_tokens is None else self.working_set_tokens
        return replace(plan, serving=replace(plan.serving, kv_aware_efficiency=self.efficiency,
                                             prefix_cache_tokens=self.cache_tokens_per_worker,
                                             prefix_working_set_tokens=ws))
