"""Collective communication time from the interconnect topology.

A collective over ``group`` ranks runs on the scale-up fabric when the group fits in one
scale-up domain. A larger group spans ⌈group/domain⌉ domains and runs hierarchically: the part
of the traffic that stays inside a domain moves at scale-up rates, the part between domains
over each rank's scale-out NIC (two-level all-reduce / all-gather, all-to-all split by
destination). Inside a domain the fabric's topology decides the rate: a switch (NVSwitch)
gives each rank its full bandwidth to any peer; a mesh (xGMI) gives each peer pair one link;
a torus (TPU ICI) runs rings per dimension over neighbour links (``torus``). The latency term is
one per-call latency of each tier used (NCCL-style one-shot/LL protocols for the small messages
of inference), plus a log2 term across domains, or the torus diameter in hops.
"""

from __future__ import annotations

import numpy as np

from .graph import Collective
from .specs.hardware import HardwareSpec
from .units import US


def link_bandwidth(hw: HardwareSpec, group):
    """Per-rank usable bandwidth (B/s, before comm_fraction) of the fabric a group of ``group``
    ranks uses inside one domain (the ranks of one domain when the group spans several).

    Notes
    -----
    switch/torus/pcie: the per-accelerator scale-up bandwidth. mesh (xGMI, Gaudi): each peer pair
    has bandwidth/(domain−1), so a group of n uses n−1 links: bandwidth·(n−1)/(domain−1).
    """
    su = hw.scale_up
    group = np.minimum(np.asarray(group, dtype=float), su.domain_size)
    if su.topology == "mesh" and su.domain_size > 1:
        return su.bandwidth * np.minimum(np.maximum(group - 1, 1), su.domain_size - 1) / (su.domain_size - 1)
    return np.full_like(group, su.bandwidth)


def _flat_volume(kind: Collective, payload_bytes, n):
    """Bytes each rank moves for a one-level collective of n ranks (ring / direct algorithms)."""
    frac = (n - 1) / np.maximum(n, 1)
    if kind == Collective.ALL_REDUCE:
        return 2 * frac * payload_bytes
    if kind == Collective.P2P:
        return np.where(n > 1, payload_bytes, 0.0)
    return frac * payload_bytes


def _hierarchical(kind: Collective, payload_bytes, n, d):
    """(bytes over the scale-up fabric, bytes over the NIC) per rank for n ranks packed into
    domains of d, on the busiest rank.

    Notes
    -----
    m = ⌈n/d⌉ domains; the last may hold only g = n − d·(m−1) ranks, and a rank there sends the
    most off-domain, so the NIC terms use g (g = d when d divides n). all-reduce:
    reduce-scatter + all-gather inside the domain (2(d−1)/d·S) and an all-reduce of each rank's
    1/g shard across domains (2(m−1)/m·S/g). all-gather (S gathered): (n−g)/(n·g)·S enters
    each NIC, then (d−1)/d·S inside. all-to-all (S sent per rank, spread evenly over
    destinations): (d−1)/n·S stays in the domain, (n−g)/n·S leaves it. p2p: the payload crosses
    the NIC.
    """
    m = np.ceil(n / d - 1e-9)
    g = n - d * (m - 1)
    inner = np.minimum(n, d)
    if kind == Collective.ALL_REDUCE:
        return 2 * (inner - 1) / inner * payload_bytes, 2 * (m - 1) / m * payload_bytes / g
    if kind == Collective.ALL_GATHER:
        return (inner - 1) / inner * payload_bytes, (n - g) / (n * g) * payload_bytes
    if kind == Collective.ALL_TO_ALL:
        return (inner - 1) / n * payload_bytes, (n - g) / n * payload_bytes
    return 0.0 * payload_bytes, payload_bytes


def collective_time(kind: Collective, payload_bytes, group, hw: HardwareSpec, comm_fraction=None, fanout=None):
    """Seconds for one collective of ``kind``; ``payload_bytes`` per rank; broadcasts over arrays.

    Notes
    -----
    Inside one domain: all-reduce (ring) 2(n−1)/n · S / BW, on a switch at the profile's
    ``all_reduce_fraction`` where it sets one (NVLS in-switch reduction); all-gather (n−1)/n · S / BW (S =
    gathered size); all-to-all (n−1)/n · S / BW (S = bytes each rank sends); p2p S / BW; on a
    torus, rings per dimension (``torus.collective_time``). Across domains: the two-level split
    of ``_hierarchical``, scale-up and NIC phases in sequence. A group of 1 costs 0.
    References: Thakur, Rabenseifner & Gropp (2005), "Optimization of collective communication
    operations in MPICH"; shared/reference/accelerators.md (NCCL bus-bandwidth fractions; leaving
    the node roughly halves all-reduce bus bandwidth on 4x P6-B200).

    ``fanout`` (a ``graph.Fanout``; all-to-all across domains only): for its ``share`` of the
    tokens the collective sends a token once per destination domain over the NIC and forwards it
    to that domain's ranks over the scale-up fabric (MoE dispatch and combine of prompt tokens,
    DeepEP's normal kernels): the NIC carries token bytes × ``domain_fanout`` in place of the even
    spread's (n − g)/n · S, and the forwarding, (n − d)/n · S · (d − 1)/d, joins the scale-up
    phase; the rest (decode tokens, DeepEP's low-latency kernels) go at the even spread.
    """
    from . import torus

    su = hw.scale_up
    ring = hw.efficiency.comm_fraction if comm_fraction is None else comm_fraction
    eff = ring  # the scale-up phase's fraction; the NIC phase keeps the ring's
    if (comm_fraction is None and kind == Collective.ALL_REDUCE and su.topology == "switch"
            and hw.efficiency.all_reduce_fraction is not None):
        eff = hw.efficiency.all_reduce_fraction  # in-switch reduction (NVLS)
    n = np.asarray(group, dtype=float)
    d = float(su.domain_size)
    inside = n <= d
    if su.topology == "torus":
        t_in = torus.collective_time(kind, payload_bytes, np.minimum(n, d), hw, eff)
    else:
        t_in = _flat_volume(kind, payload_bytes, n) / (link_bandwidth(hw, n) * eff) + su.latency_us * US
    if np.all(inside):
        return np.where(n > 1, t_in, 0.0)
    nn = np.maximum(n, d)
    up_bytes, out_bytes = _hierarchical(kind, payload_bytes, nn, d)
    if fanout is not None and kind == Collective.ALL_TO_ALL:
        reach = domain_fanout(nn, d, fanout.top_k, fanout.n_groups, fanout.top_k_groups)
        share = np.clip(np.asarray(fanout.share, dtype=float), 0.0, 1.0)
        up_bytes = up_bytes + share * (nn - d) / nn * payload_bytes * (d - 1) / d
        out_bytes = share * np.minimum(fanout.token_bytes * reach, out_bytes) + (1.0 - share) * out_bytes
    t_up = up_bytes / (link_bandwidth(hw, d) * eff) + su.latency_us * US
    domains = np.maximum(np.ceil(n / d - 1e-9), 1.0)
    t_out = out_bytes / (hw.scale_out.bandwidth * ring) + hw.scale_out.latency_us * US * (1 + np.log2(domains))
    return np.where(n > 1, np.where(inside, t_in, t_up + t_out), 0.0)


def domain_fanout(ep, domain_size, top_k, n_groups=None, top_k_groups=None):
    """Expected scale-up domains other than its own that one token's top-k experts reach, over an
    EP group of ``ep`` ranks packed into domains of ``domain_size`` (arrays broadcast).

    Notes
    -----
    m = ⌈ep/domain⌉ domains. A token's experts can lie in c domains: all m, or under group-limited
    routing (``n_groups`` G, ``top_k_groups`` M; experts laid out group by group) the domains of
    its M groups: with m ≤ G (G/m groups per domain) the expected distinct domains of M groups
    drawn from G, m·(1 − C(G − G/m, M)/C(G, M)); with m > G each group spans m/G domains,
    min(m, M·m/G). The k experts, spread evenly over those, reach c·(1 − (1 − 1/c)^k) domains,
    a share (m − 1)/m of them not the sender's. DeepEP and the DeepSeek-V3 report send a token
    once per destination node over the network and forward it inside the node over NVLink
    (DeepSeek-V3 technical report, arXiv 2412.19437, section 3.2.2: each token reaches at most 4
    nodes).
    """
    ep = np.maximum(np.asarray(ep, dtype=float), 1.0)
    m = np.maximum(np.ceil(ep / float(domain_size) - 1e-9), 1.0)
    c = m
    if n_groups is not None and top_k_groups is not None and top_k_groups < n_groups:
        G, M = float(n_groups), int(top_k_groups)
        per = G / np.minimum(m, G)  # groups per domain where m ≤ G
        miss = np.ones_like(m)
        for i in range(M):  # C(G − per, M) / C(G, M) as a product of M ratios
            miss = miss * np.maximum(G - per - i, 0.0) / (G - i)
        c = np.where(m <= G, m * (1.0 - miss), np.minimum(m, M * m / G))
    c = np.maximum(c, 1.0)
    reached = c * (1.0 - np.power(1.0 - 1.0 / c, top_k))
    return np.where(m > 1, reached * (m - 1.0) / m, 0.0)
