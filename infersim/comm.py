"""Collective communication time per interconnect tier.

A collective over ``group`` ranks runs on the scale-up fabric when the group fits in the
hardware's scale-up domain, and over the scale-out network otherwise. Bandwidth terms follow the
ring/all-to-all algorithms; the latency term is one per-call latency of the tier (NCCL-style
one-shot/LL protocols for the small messages of inference), plus a log2 term across nodes.
"""

from __future__ import annotations

import numpy as np

from .graph import Collective
from .specs.hardware import HardwareSpec
from .units import US


def link_bandwidth(hw: HardwareSpec, group):
    """Per-rank usable bandwidth (B/s, before comm_fraction) for a collective of ``group`` ranks.

    Notes
    -----
    switch/torus/pcie: the per-accelerator scale-up bandwidth. mesh (xGMI, Gaudi): each peer pair
    has bandwidth/(domain−1), so a group of n uses n−1 links: bandwidth·(n−1)/(domain−1).
    Beyond the domain: the scale-out NIC bandwidth per accelerator.
    """
    su = hw.scale_up
    group = np.asarray(group, dtype=float)
    inside = group <= su.domain_size
    if su.topology == "mesh" and su.domain_size > 1:
        up = su.bandwidth * np.minimum(np.maximum(group - 1, 1), su.domain_size - 1) / (su.domain_size - 1)
    else:
        up = su.bandwidth
    return np.where(inside, up, hw.scale_out.bandwidth)


def collective_time(kind: Collective, payload_bytes, group, hw: HardwareSpec, comm_fraction=None):
    """Seconds for one collective of ``kind``; ``payload_bytes`` per rank; broadcasts over arrays.

    Notes
    -----
    all-reduce (ring): 2(n−1)/n · S / BW; all-gather: (n−1)/n · S / BW (S = gathered size);
    all-to-all: (n−1)/n · S / BW (S = bytes each rank sends); p2p: S / BW. A group of 1 costs 0.
    Latency: the tier's per-call latency, plus log2 of the node count when leaving the domain.
    References: Thakur, Rabenseifner & Gropp (2005), "Optimization of collective communication
    operations in MPICH"; shared/reference/accelerators.md (NCCL bus-bandwidth fractions).
    """
    eff = hw.efficiency.comm_fraction if comm_fraction is None else comm_fraction
    n = np.asarray(group, dtype=float)
    bw = link_bandwidth(hw, n) * eff
    frac = (n - 1) / np.maximum(n, 1)
    if kind == Collective.ALL_REDUCE:
        volume = 2 * frac * payload_bytes
    elif kind == Collective.P2P:
        volume = np.where(n > 1, payload_bytes, 0.0)
    else:
        volume = frac * payload_bytes
    inside = n <= hw.scale_up.domain_size
    nodes = np.maximum(n / hw.scale_up.domain_size, 1.0)
    latency = np.where(inside, hw.scale_up.latency_us, hw.scale_out.latency_us * (1 + np.log2(nodes))) * US
    return np.where(n > 1, volume / bw + latency, 0.0)
