"""Roofline costing: time of one operator from its FLOPs and bytes, array in, array out.

time = max(FLOPs / (η_compute · peak), bytes / (η_memory · bandwidth)); the efficiencies are
hardware-profile data. Small GEMMs lose compute efficiency through tile under-utilisation:
η(m) = η_compute · m / (m + m_half). Ops that evaluate exponentials (attention's softmax) also
meet a third roof, exps / (η_compute · exp_rate), added by the step pricing (``engine._price``).
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


def compute_time(flops, flop_rate, efficiency):
    """Seconds to execute ``flops`` at ``efficiency`` × ``flop_rate`` (FLOP/s). Broadcasts."""
    return flops / (efficiency * flop_rate)


def memory_time(bytes_moved, bandwidth, efficiency):
    """Seconds to move ``bytes_moved`` at ``efficiency`` × ``bandwidth`` (B/s). Broadcasts."""
    return bytes_moved / (efficiency * bandwidth)


def op_time(flops, bytes_moved, flop_rate, bandwidth, compute_efficiency, memory_efficiency):
    """Roofline time of one op, seconds, and its compute and memory components.

    Returns
    -------
    (time, compute_time, memory_time), each broadcast over the inputs.
    """
    tc = compute_time(flops, flop_rate, compute_efficiency)
    tm = memory_time(bytes_moved, bandwidth, memory_efficiency)
    return np.maximum(tc, tm), tc, tm


def bound_by(compute_t, memory_t):
    """Bound code per point: COMPUTE where compute time dominates, else MEMORY."""
    return np.where(compute_t >= memory_t, Bound.COMPUTE, Bound.MEMORY)
