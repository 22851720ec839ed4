"""Roofline costing: time of one operator from its FLOPs and bytes, array in, array out.

time = max(FLOPs / (η_compute · peak), bytes / (η_memory · bandwidth)); the efficiencies are
hardware-profile data. Small GEMMs lose compute efficiency through tile under-utilisation:
η(m) = η_compute · m / (m + m_half); GEMMs overlap their load and MMA phases only partly
(``op_time``'s ``overlap``).
Ops that evaluate exponentials (attention's softmax) also meet a third roof,
exps / (η_exp · exp_rate) (``exp_roof``).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Bound(IntEnum):
    COMPUTE = 0
    MEMORY = 1
    COMM = 2
    OVERHEAD = 3


def gemm_efficiency(m, compute_fraction, m_half):
    """Achievable fraction of peak for a GEMM with ``m`` rows (broadcastable).

    Notes
    -----
    η(m) = compute_fraction · m / (m + m_half); m_half = 0 gives a flat efficiency.
    """
    m = np.maximum(np.asarray(m, dtype=float), 1e-9)
    return compute_fraction * m / (m + m_half)


K_BLOCK_BYTES = 128.0
"""Bytes of an operand row one GEMM mainloop k-block spans (the TMA 128-byte swizzle)."""


def k_depth_efficiency(k, element_bytes, overhead_blocks):
    """Share of a GEMM's large-K efficiency at reduction depth ``k`` (broadcastable).

    Notes
    -----
    n = ⌈k·element_bytes / 128⌉ k-blocks per output tile and a fixed ``overhead_blocks`` (pipeline
    fill, epilogue) per tile: η_K = n / (n + overhead_blocks). k ≤ 0 (not a tiled GEMM) gives 1.
    Source: ``efficiency.gemm_k_overhead_blocks`` (DeepGEMM H800 measurements).
    """
    k = np.asarray(k, dtype=float)
    n = np.maximum(np.ceil(k * element_bytes / K_BLOCK_BYTES - 1e-9), 1.0)
    return np.where(k > 0, n / (n + overhead_blocks), 1.0)


def compute_time(flops, flop_rate, efficiency):
    """Seconds to execute ``flops`` at ``efficiency`` × ``flop_rate`` (FLOP/s). Broadcasts."""
    return flops / (efficiency * flop_rate)


def memory_time(bytes_moved, bandwidth, efficiency):
    """Seconds to move ``bytes_moved`` at ``efficiency`` × ``bandwidth`` (B/s). Broadcasts."""
    return bytes_moved / (efficiency * bandwidth)


def op_time(flops, bytes_moved, flop_rate, bandwidth, compute_efficiency, memory_efficiency, overlap=1.0):
    """Roofline time of one op, seconds, and its compute and memory components.

    Notes
    -----
    time = tc + tm − overlap · min(tc, tm): with ``overlap`` = 1 (the default) the ideal roofline
    max(tc, tm); with less, part of the shorter phase is not hidden behind the longer one. A GEMM
    kernel overlaps its operand loads with the MMAs in steady state, but a GEMM of a few tiles per
    SM (decode at moderate batch) spends much of its time in pipeline fill and drain, where they
    do not overlap; the loss is largest where tc ≈ tm (near the ridge point) and vanishes when
    either side dominates, so a batch-1 GEMM stays memory-bound at streaming speed.

    Returns
    -------
    (time, compute_time, memory_time), each broadcast over the inputs.
    """
    tc = compute_time(flops, flop_rate, compute_efficiency)
    tm = memory_time(bytes_moved, bandwidth, memory_efficiency)
    if np.isscalar(overlap) and overlap >= 1.0:
        return np.maximum(tc, tm), tc, tm
    return overlapped(tc, tm, overlap), tc, tm


def overlapped(a, b, overlap):
    """Time of two phases of which a share ``overlap`` of the shorter runs under the longer:
    a + b − overlap·min(a, b) (1: max(a, b); 0: a + b). Broadcasts."""
    return a + b - overlap * np.minimum(a, b)


def exp_roof(t, tc, exps, exp_rate, efficiency):
    """The softmax exponentials' roof on top of an op's roofline time.

    Returns (time, compute_time, exp_bound): ``exps`` / (``efficiency`` · ``exp_rate``) raises both
    the op's time and its compute time where it is longer (exponential-bound time counts as
    compute-bound); ``exp_bound`` marks those points. No rate (None) or no exps: unchanged.
    """
    if exp_rate is None or (np.isscalar(exps) and exps == 0):
        return t, tc, False
    te = compute_time(exps, exp_rate, efficiency)
    return np.maximum(t, te), np.maximum(tc, te), te > tc


def bound_by(compute_t, memory_t):
    """Bound code per point: COMPUTE where compute time dominates, else MEMORY."""
    return np.where(compute_t >= memory_t, Bound.COMPUTE, Bound.MEMORY)
