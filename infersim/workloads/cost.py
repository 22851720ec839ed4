"""Shared costing for the non-LLM workloads: one stage's time from FLOPs, bytes and collectives.

Every time comes from the roofline (``infersim.roofline``) and the collective model
(``infersim.comm``). Kernel efficiencies are properties of the die and its kernel libraries, not
of an LLM serving stack: GEMMs run at the die's measured MAMF fraction (``compute.mamf_fraction``,
with the small-GEMM knee ``gemm_m_half``), long-sequence attention at ``dense_attention_fraction``
of peak plus its softmax/SiLU work on the special-function unit (``compute.exp_rate_tera_per_s``,
``softmax_overlap``), streaming and gather traffic at ``memory_fraction``, collectives at
``comm_fraction``, each launched kernel ``launch_overhead_us``. The LLM fit's ``compute_fraction``
and ``attention_fraction`` are not read where a sourced value exists: they absorb LLM-serving
effects (paged decode, short prefills, rack-scale scheduling) and differ between dies that run
the same kernels at the same speed (GB200 0.52 / 0.22 against B200 0.71 / 0.32 after the
2026-11-25 fit). The LLM round presets' software-maturity multipliers are not applied either:
these workloads run on other software (TensorRT / Transformer Engine for the video transformer,
TensorRT for DLRMv3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import comm, roofline
from ..graph import Collective
from ..specs.hardware import HardwareSpec
from ..units import BYTES_PER_ELEMENT

KINDS: tuple[str, ...] = ("gemm", "attention", "elementwise", "memory", "comm", "overhead")
"""Time categories of a workload breakdown (memory = gathers such as embedding lookups)."""


@dataclass
class StageCost:
    """Seconds of one stage per kind (arrays broadcast over a layout grid), and the bound split."""

    by_kind: dict[str, np.ndarray] = field(default_factory=lambda: {k: 0.0 for k in KINDS})
    compute_bound: np.ndarray = 0.0
    memory_bound: np.ndarray = 0.0
    kernels: np.ndarray = 0.0

    @property
    def total(self):
        return sum(self.by_kind.values())

    def add(self, other: "StageCost", times=1.0) -> "StageCost":
        """This stage plus ``times`` × ``other`` (a new object)."""
        return StageCost({k: self.by_kind[k] + times * other.by_kind[k] for k in KINDS},
                         self.compute_bound + times * other.compute_bound,
                         self.memory_bound + times * other.memory_bound, self.kernels + times * other.kernels)


class Coster:
    """Accumulates operator times on one device of ``hw``; every method broadcasts."""

    def __init__(self, hw: HardwareSpec):
        self.hw = hw
        self.eff = hw.efficiency
        self.cost = StageCost()

    def _op(self, kind: str, flops, bytes_moved, precision: str, efficiency, count=1.0):
        rate = self.hw.compute.flop_rate(precision)
        t, tc, tm = roofline.op_time(flops, bytes_moved, rate, self.hw.memory.bandwidth, efficiency,
                                     self.eff.memory_fraction)
        self._add(kind, t, tc, tm, count)

    def _add(self, kind: str, t, tc, tm, count):
        c = self.cost
        c.by_kind[kind] = c.by_kind[kind] + count * t
        c.compute_bound = c.compute_bound + count * np.where(tc >= tm, t, 0.0)
        c.memory_bound = c.memory_bound + count * np.where(tc >= tm, 0.0, t)
        c.kernels = c.kernels + count

    def gemm(self, m, n, k, precision: str, count=1.0, weight_bytes_per_element=None):
        """[m, k] x [k, n]; weights read once, activations in and out in ``precision``
        (16 bit for wider-than-fp8 formats). Large GEMMs run at the die's measured MAMF fraction
        for the precision (``compute.mamf_fraction``; the fitted ``compute_fraction`` where none
        is measured), small-M ones below it by the ``gemm_m_half`` knee."""
        b = BYTES_PER_ELEMENT[precision]
        wb = b if weight_bytes_per_element is None else weight_bytes_per_element
        m = np.asarray(m, dtype=float)
        peak_fraction = self.hw.compute.mamf(precision) or self.eff.compute_fraction
        eff = roofline.gemm_efficiency(m, peak_fraction, self.eff.gemm_m_half)
        self._op("gemm", 2.0 * m * n * k, k * n * wb + m * k * b + m * n * 2.0, precision, eff, count)

    def attention(self, flops, bytes_moved, precision: str, count=1.0, sfu_ops=0.0):
        """A fused long-sequence attention kernel. ``sfu_ops``: special-function-unit results per
        call (one exponential per score element and head for a softmax; an exponential and a
        reciprocal for HSTU's SiLU, x·σ(x) = x / (1 + e^−x)).

        Notes
        -----
        MMA time at ``dense_attention_fraction`` of the precision's peak and SFU time at the
        unit's rate (``compute.exp_rate_tera_per_s``, the same 16 results/clock/SM row of the CUDA
        throughput table covers ex2 and rcp) add, less ``softmax_overlap`` × the shorter; the
        Q/K/V/O traffic is a memory roof under both. Hardware without a sourced SFU rate has no
        SFU term.
        """
        rate = self.hw.compute.flop_rate(precision)
        t_mma = roofline.compute_time(flops, rate, self.eff.dense_attention_fraction)
        exp_rate = self.hw.compute.exp_rate
        t_sfu = 0.0 if exp_rate is None else np.asarray(sfu_ops, dtype=float) / exp_rate
        tc = roofline.overlapped(t_mma, t_sfu, self.eff.softmax_overlap)
        tm = roofline.memory_time(bytes_moved, self.hw.memory.bandwidth, self.eff.memory_fraction)
        self._add("attention", np.maximum(tc, tm), tc, tm, count)

    def elementwise(self, bytes_moved, count=1.0):
        """Memory-streaming kernels (norms, activations, residuals): bytes read + written."""
        self._op("elementwise", 0.0, bytes_moved, "bf16", self.eff.compute_fraction, count)

    def gather(self, bytes_moved, count=1.0):
        """Row gathers from HBM (embedding lookups)."""
        self._op("memory", 0.0, bytes_moved, "bf16", self.eff.compute_fraction, count)

    def collective(self, kind: Collective, payload_bytes, group, count=1.0):
        t = comm.collective_time(kind, payload_bytes, group, self.hw)
        self.cost.by_kind["comm"] = self.cost.by_kind["comm"] + count * t
        self.cost.kernels = self.cost.kernels + count * (np.asarray(group) > 1)

    def overhead(self, seconds, count=1.0):
        self.cost.by_kind["overhead"] = self.cost.by_kind["overhead"] + count * seconds

    def finish(self) -> StageCost:
        """The stage with one launch overhead per kernel added."""
        c = self.cost
        c.by_kind["overhead"] = c.by_kind["overhead"] + c.kernels * self.eff.launch_overhead_us * 1e-6
        return c


def bound_name(by_kind: dict[str, float], compute_bound: float, memory_bound: float) -> str:
    """Dominant bound of a stage: compute, memory, communication or overhead."""
    cands = {"compute": compute_bound, "memory": memory_bound, "communication": by_kind["comm"],
             "overhead": by_kind["overhead"]}
    return max(cands.items(), key=lambda kv: kv[1])[0]
