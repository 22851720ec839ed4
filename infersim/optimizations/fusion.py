"""Kernel fusion and graph capture.

Changes: ``plan.graph_passes`` (adds a pass that folds fusable elementwise ops — norms, residual
adds, activations, RoPE, sampling prep — into their producers, removing their HBM round trips and
kernel launches; where the engine names the ops its stack absorbs, ``Engine.fused_elementwise``,
only those) and ``plan.launch_scale`` (CUDA-graph capture / PDL leave a fraction of the
per-kernel launch cost; which per-rank batch sizes are captured is an engine setting,
``plan.engine.graph_sizes``, from the round preset). Neutral: ``enabled: false``.
Source: shared/reference/effects.md section 6 (TRT-LLM tech blogs 1 and 3: CUDA graphs +22 %,
fused top-k routing +7.4 %, fused all-reduce + RMSNorm; launch ~4-8 us without graphs, ~1-2 us
with graphs).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import ClassVar

from pydantic import Field

from ..graph import OpGraph
from ..plan import Plan
from .base import Stage, Transform, register


def fold_elementwise(graph: OpGraph, names: frozenset[str] | None = None) -> OpGraph:
    """Drop fusable elementwise ops (only those in ``names`` where given: the ones the stack's
    kernels absorb): their work happens inside the producing kernel's epilogue."""
    return replace(graph, ops=tuple(op for op in graph.ops if not (op.fusable and (names is None or op.name in names))),
                   passes=graph.passes + ("fusion",))


@register
class Fusion(Transform):
    """Fuse elementwise chains into their producers and capture the step as a graph."""

    kind: ClassVar[str] = "fusion"
    stage: ClassVar[Stage] = Stage.GRAPH
    summary: ClassVar[str] = "fold norms/activations/residuals into GEMM epilogues; graph capture"
    rank: ClassVar[int] = 0

    fuse_elementwise: bool = True
    """Fold elementwise ops into their producers."""
    graph_launch_fraction: float = Field(default=0.3, ge=0, le=1)
    """Share of the per-kernel launch cost left after graph capture (1 = no capture)."""

    def _apply(self, plan: Plan) -> Plan:
        named = plan.engine.fused_elementwise
        fold = fold_elementwise if named is None else partial(fold_elementwise, names=frozenset(named))
        passes = plan.graph_passes + ((("fusion", fold),) if self.fuse_elementwise else ())
        return replace(plan, graph_passes=passes, launch_scale=plan.launch_scale * self.graph_launch_fraction)
